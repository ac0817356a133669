package metrics_test

import (
	"errors"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/metrics/metricstest"
)

// A refused claim is counted by its sentinel's code, a bounded label.
func ExampleReason() {
	rec := metricstest.New()
	err := fmt.Errorf("claim volume default/data: %w", csi.ErrMaxClaims)
	rec.IncrCounterWithLabels(metrics.ClaimsRefused, 1, []metrics.Label{{Name: "reason", Value: metrics.Reason(err)}})
	fmt.Println(rec.Names())
	fmt.Println(metrics.Reason(nil), metrics.Reason(errors.New("something else")))
	// Output:
	// [csikit.claims.refused;reason=max_claims]
	// ok other
}
