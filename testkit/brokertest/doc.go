// Package brokertest finds or starts the brokers that egrid's broker tests run against, and
// puts a [Proxy] in front of them so a test can take a broker down, stall it and bring it
// back without touching the server.
//
// The machines egrid is built on run NATS with JetStream on 127.0.0.1:4222, RabbitMQ on 5672
// (guest/guest), Redis on 6379 and PostgreSQL on 5432 (trust auth, database test). Each
// finder returns the settings of the running server. Where none runs (a fresh laptop), [NATS]
// starts an in-process NATS server with JetStream (github.com/nats-io/nats-server/v2) and the
// others skip the test with a message naming the missing server — except under CI=true, where
// a missing server fails the test. The EGRID_TEST_NATS_URL, EGRID_TEST_RABBITMQ_URL,
// EGRID_TEST_REDIS_ADDR and EGRID_TEST_POSTGRES_DSN environment variables point the finders
// elsewhere.
//
// [Unique] names subjects, queues, streams and tables so reruns never see old data.
//
// brokertest imports sinks/broker; only tests import it.
package brokertest
