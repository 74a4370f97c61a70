package main

import (
	"fmt"
	"net/http"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router"
)

type armSubscription struct {
	Name       string `json:"name"`
	Properties struct {
		router.SubscriptionSpec
		DeliveryState *struct {
			Backlog                     int     `json:"backlog"`
			InFlight                    int     `json:"inFlight"`
			OldestUndeliveredAgeSeconds float64 `json:"oldestUndeliveredAgeSeconds"`
			Probation                   bool    `json:"probation"`
			ProbationCause              string  `json:"probationCause"`
		} `json:"deliveryState"`
	} `json:"properties"`
}

func subscriptionCommand(e env) *cli.Command {
	topicFlag := &cli.StringFlag{Name: "topic", Usage: "topic name", Required: true}
	nameFlag := &cli.StringFlag{Name: "name", Aliases: []string{"n"}, Usage: "event subscription name", Required: true}
	path := func(c *cli.Context) string {
		return "/admin/topics/" + c.String("topic") + "/eventSubscriptions/" + c.String("name")
	}
	return &cli.Command{
		Name:  "event-subscription",
		Usage: "manage event subscriptions on a running server",
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "create or replace an event subscription",
				Flags: append(serverFlags(), topicFlag, nameFlag, outputFlag(),
					&cli.StringFlag{Name: "endpoint", Usage: "webhook URL events are delivered to", Required: true},
					&cli.StringFlag{Name: "endpoint-type", Usage: "destination type", Value: "webhook"},
					&cli.IntFlag{Name: "max-delivery-attempts", Usage: "maximum delivery attempts, 1-30 (default 30)"},
					&cli.IntFlag{Name: "event-ttl", Usage: "event time to live in minutes, 1-1440 (default 1440)"},
					&cli.IntFlag{Name: "max-events-per-batch", Usage: "maximum events per batch, 1-5000 (turns batching on)"},
					&cli.IntFlag{Name: "preferred-batch-size-in-kilobytes", Usage: "preferred batch size in KB, 1-1024 (turns batching on)"},
					&cli.StringFlag{Name: "event-delivery-schema", Usage: "EventGridSchema, CloudEventSchemaV1_0 or CustomInputSchema"},
					&cli.StringFlag{Name: "deadletter-container", Usage: "bucket dead-lettered events are written to"},
					&cli.StringFlag{Name: "retry-profile", Usage: "eventgrid, eventgrid-2019 or namespace"},
				),
				Action: func(c *cli.Context) error {
					spec := router.SubscriptionSpec{
						Destination: router.Destination{EndpointType: c.String("endpoint-type"), Properties: router.DestinationProperties{
							EndpointURL:                   c.String("endpoint"),
							MaxEventsPerBatch:             c.Int("max-events-per-batch"),
							PreferredBatchSizeInKilobytes: c.Int("preferred-batch-size-in-kilobytes"),
						}},
						RetryPolicy: router.RetryPolicy{
							MaxDeliveryAttempts: c.Int("max-delivery-attempts"), EventTimeToLiveInMinutes: c.Int("event-ttl"),
							Profile: c.String("retry-profile"),
						},
						EventDeliverySchema: c.String("event-delivery-schema"),
					}
					if b := c.String("deadletter-container"); b != "" {
						spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
						spec.DeadLetterDestination.Properties.BlobContainerName = b
					}
					var out armSubscription
					if err := newClient(c, e).do(http.MethodPut, path(c), map[string]any{"properties": spec}, &out); err != nil {
						return err
					}
					return printSubscriptions(e, c.String("output"), out)
				},
			},
			{
				Name: "show", Usage: "show an event subscription with its delivery state", Flags: append(serverFlags(), topicFlag, nameFlag, outputFlag()),
				Action: func(c *cli.Context) error {
					var out armSubscription
					if err := newClient(c, e).do(http.MethodGet, path(c), nil, &out); err != nil {
						return err
					}
					return printSubscriptions(e, c.String("output"), out)
				},
			},
			{
				Name: "list", Usage: "list a topic's event subscriptions", Flags: append(serverFlags(), topicFlag, outputFlag()),
				Action: func(c *cli.Context) error {
					var out struct{ Value []armSubscription }
					if err := newClient(c, e).do(http.MethodGet, "/admin/topics/"+c.String("topic")+"/eventSubscriptions", nil, &out); err != nil {
						return err
					}
					return printSubscriptions(e, c.String("output"), out.Value...)
				},
			},
			{
				Name: "delete", Usage: "delete an event subscription", Flags: append(serverFlags(), topicFlag, nameFlag),
				Action: func(c *cli.Context) error {
					if err := newClient(c, e).do(http.MethodDelete, path(c), nil, nil); err != nil {
						return err
					}
					fmt.Fprintln(e.Stdout, "deleted event subscription", c.String("name"))
					return nil
				},
			},
		},
	}
}

func printSubscriptions(e env, format string, subs ...armSubscription) error {
	if format == "json" {
		if len(subs) == 1 {
			return printJSON(e.Stdout, subs[0])
		}
		return printJSON(e.Stdout, subs)
	}
	fmt.Fprintf(e.Stdout, "%-30s %-10s %-50s %s\n", "NAME", "TYPE", "ENDPOINT", "STATE")
	for _, s := range subs {
		state := ""
		if ds := s.Properties.DeliveryState; ds != nil {
			state = fmt.Sprintf("backlog=%d inFlight=%d", ds.Backlog, ds.InFlight)
			if ds.Probation {
				state += " probation=" + ds.ProbationCause
			}
		}
		p := s.Properties.Destination
		fmt.Fprintf(e.Stdout, "%-30s %-10s %-50s %s\n", s.Name, p.EndpointType, p.Properties.EndpointURL, state)
	}
	return nil
}
