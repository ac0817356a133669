package csitest_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

// TestPlugin_Concurrent drives the fake from many goroutines while the
// test reads the model and log and turns knobs; run it with -race.
func TestPlugin_Concurrent(t *testing.T) {
	p, c := start(t, csitest.Config{Type: csi.PluginTypeNode})
	ctx := ctxT(t)
	_, target := paths(t)
	parent := filepath.Dir(target)
	const workers, rounds = 8, 10
	for i := range workers {
		p.AddVolume(fmt.Sprintf("v%d", i), 1, nil)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*2)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("v%d", i)
			tp := filepath.Join(parent, id)
			for range rounds {
				_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: tp, VolumeCapability: mountCap(snw)})
				errs <- err
				_, err = c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: tp})
				errs <- err
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range rounds {
			_ = p.Calls()
			_ = p.Volumes()
			_ = p.Violations()
			p.SetLatency(csitest.MethodNodeGetInfo, 0)
			p.FailNext(csitest.MethodNodeGetInfo, codes.Unavailable, 1)
			p.ClearFaults()
		}
	}()
	wg.Wait()
	<-done
	close(errs)
	for err := range errs {
		noErr(t, err)
	}
	if n := p.CallCount(csitest.MethodNodePublishVolume); n != workers*rounds {
		t.Errorf("%d publishes logged, want %d", n, workers*rounds)
	}
	for _, v := range p.Volumes() {
		if v.InUse() {
			t.Errorf("volume %s still in use", v.ID)
		}
	}
	p.RequireNoViolations(t)
}
