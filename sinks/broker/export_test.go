package broker

import (
	"net"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Classify exposes classify to the black-box table test.
var Classify = classify

// NewLazyPublisher returns the publisher [Brokers] gives for a broker of kind k, which opens
// its connection with open.
func NewLazyPublisher(k Kind, open func() (message.Publisher, error)) message.Publisher {
	return newLazyPublisher(k, open)
}

// NewLazySubscriber returns the subscriber [Brokers] gives for a broker of kind k, which
// opens its connection with open.
func NewLazySubscriber(k Kind, open func() (message.Subscriber, error)) message.Subscriber {
	return newLazySubscriber(k, open)
}

// RabbitMQAnswerTimeout exposes the bound on each wait for RabbitMQ's answer.
const RabbitMQAnswerTimeout = rabbitMQAnswerTimeout

// OpenRabbitMQPublisher opens the RabbitMQ publisher over a connection made by dial.
func OpenRabbitMQPublisher(dial func(network, addr string) (net.Conn, error)) (message.Publisher, error) {
	return openRabbitMQPublisher(RabbitMQServer{URL: "amqp://guest:guest@127.0.0.1:5672/"}, dial)
}

// OpenRabbitMQSubscriber opens the RabbitMQ subscriber over a connection made by dial.
func OpenRabbitMQSubscriber(dial func(network, addr string) (net.Conn, error)) (message.Subscriber, error) {
	return openRabbitMQSubscriber(RabbitMQServer{URL: "amqp://guest:guest@127.0.0.1:5672/"}, dial)
}

// OpenRabbitMQSubscriberWithoutHeartbeats opens the RabbitMQ subscriber over a connection made
// by dial, that sends no heartbeats (with a server that asks for none). In a synctest bubble, a
// write the server does not take holds amqp091's write lock, and its heartbeater, waiting for
// that lock (no durable block), would keep the bubble's clock from moving on.
func OpenRabbitMQSubscriberWithoutHeartbeats(dial func(network, addr string) (net.Conn, error)) (message.Subscriber, error) {
	// heartbeat=0 in the URI is amqp091's only way to ask for none (0 in the config is its
	// default, 10 s).
	return openRabbitMQSubscriberConfig(RabbitMQServer{URL: "amqp://guest:guest@127.0.0.1:5672/?heartbeat=0"}, amqpConfig(dial))
}

// NewPerSinkLazyPublisher returns the publisher [Brokers] gives for RabbitMQ, which gives each
// sink a connection of its own opened with open.
func NewPerSinkLazyPublisher(k Kind, open func() (message.Publisher, error)) message.Publisher {
	l := newLazyPublisher(k, open)
	l.perSink = true
	return l
}
