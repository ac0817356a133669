package split_test

import (
	"testing"

	"github.com/csikit/csikit/examples/hostpathplugin/sanitytest"
)

func TestSanity_Split(t *testing.T) {
	sanitytest.Run(t, sanitytest.Split)
}
