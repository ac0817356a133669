package monolith_test

import (
	"testing"

	"github.com/csikit/csikit/examples/hostpathplugin/sanitytest"
)

func TestSanity_Monolith(t *testing.T) {
	sanitytest.Run(t, sanitytest.Monolith)
}
