// This file makes *Metrics a prometheus.Collector. It sits behind a build tag
// only because go.sum lacks the checksums of client_golang's own
// dependencies; once `go get github.com/prometheus/client_golang/prometheus@v1.25.0`
// has run, delete the build line above.

package idem

import "github.com/prometheus/client_golang/prometheus"

// desc builds counter i's descriptor; cheap enough to do on every scrape.
func (m *Metrics) desc(i int) *prometheus.Desc {
	ci := counterInfo[i]
	return prometheus.NewDesc(prometheus.BuildFQName(m.namespace, "", ci.name), ci.help, nil, nil)
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for i := range counterInfo {
		ch <- m.desc(i)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for i := range counterInfo {
		ch <- prometheus.MustNewConstMetric(m.desc(i), prometheus.CounterValue, float64(m.value(counter(i))))
	}
}
