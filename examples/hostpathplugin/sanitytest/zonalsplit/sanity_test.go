package zonalsplit_test

import (
	"testing"

	"github.com/csikit/csikit/examples/hostpathplugin/sanitytest"
)

func TestSanity_ZonalSplit(t *testing.T) {
	sanitytest.Run(t, sanitytest.Split, sanitytest.Zonal)
}
