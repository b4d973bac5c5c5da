package testenv

import (
	"net/url"
	"os"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

const defaultAMQP = "amqp://guest:guest@127.0.0.1:5672/"

// RabbitMQ gives the test the broker's URL (SHOP_TEST_AMQP_URL, or the
// local default) and a queue name of its own, deleted at cleanup. A broker
// that does not answer fails the test with how to provide one.
func RabbitMQ(t testing.TB) (amqpURL, queueName string) {
	t.Helper()
	amqpURL = os.Getenv("SHOP_TEST_AMQP_URL")
	if amqpURL == "" {
		amqpURL = defaultAMQP
	}
	u, err := url.Parse(amqpURL)
	if err != nil || !answers(u.Host) {
		t.Fatalf("testenv: RabbitMQ does not answer at %s: start rabbitmq-server locally (see .ci/run) or set SHOP_TEST_AMQP_URL", u.Host)
	}
	queueName = "test." + Random(8)
	t.Cleanup(func() {
		conn, err := amqp.Dial(amqpURL)
		if err != nil {
			return
		}
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queueName, false, false, false)
		}
	})
	return amqpURL, queueName
}
