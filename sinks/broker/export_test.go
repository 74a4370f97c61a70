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
