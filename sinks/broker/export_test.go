package broker

import "github.com/ThreeDotsLabs/watermill/message"

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
