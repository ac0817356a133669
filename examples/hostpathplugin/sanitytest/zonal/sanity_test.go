package zonal_test

import (
	"testing"

	"github.com/csikit/csikit/examples/hostpathplugin/sanitytest"
)

func TestSanity_ZonalMonolith(t *testing.T) {
	sanitytest.Run(t, sanitytest.Monolith, sanitytest.Zonal)
}
