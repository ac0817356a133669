package raftstate_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/raftstate"
	"github.com/csikit/csikit/state/sealed"
)

const (
	volSecret  = "vol-secret-4f1c9e"
	snapSecret = "snap-secret-77ad02"
	lateSecret = "late-secret-c0ffee"
)

// startSealed starts a one-server cluster on dir (boltdb log, file
// snapshots) with keyring k, and waits for it to lead.
func startSealed(t *testing.T, dir string, k *sealed.Keyring) (*raftstate.Server, *state.MemStore, error) {
	t.Helper()
	store, err := state.NewMemStore(state.Config{})
	must(t, err)
	_, tr := raft.NewInmemTransport("s1")
	srv, err := raftstate.New(raftstate.Config{
		ID: "s1", Store: store, Transport: tr, BootstrapExpect: 1, DataDir: dir, Raft: testRaftConfig(), Keyring: k,
	})
	must(t, err)
	if err := srv.Start(); err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	t.Cleanup(func() { srv.Shutdown() })
	if _, _, err := srv.WaitLeader(waitCtx(t)); err != nil {
		t.Fatalf("WaitLeader: %v", err)
	}
	// A restarted server applies the entries after its snapshot once
	// it has committed again.
	must(t, srv.Raft().Barrier(waitLimit).Error())
	return srv, store, nil
}

// sealedLifecycle writes a volume and a snapshot with secrets, takes a
// raft snapshot, then writes a volume whose secret only the log holds.
func sealedLifecycle(t *testing.T, srv *raftstate.Server, snapshot bool) {
	t.Helper()
	apply(t, srv, fingerprintCmd())
	apply(t, srv, allocsCmd("a1"))
	vol := volumeCmd("data").(state.RegisterVolume)
	vol.Volume.Secrets = csi.Secrets{"password": volSecret}
	apply(t, srv, vol)
	apply(t, srv, claimCmd("data", "a1"))
	snap := csi.Snapshot{Namespace: "default", ID: "s1", SourceVolumeID: "data", PluginID: testPlugin, Creating: true,
		Secrets: csi.Secrets{"token": snapSecret}}
	apply(t, srv, state.RegisterSnapshot{Snapshot: snap})
	if snapshot {
		must(t, srv.Raft().Snapshot().Error())
	}
	late := volumeCmd("late").(state.RegisterVolume)
	late.Volume.Secrets = csi.Secrets{"password": lateSecret}
	apply(t, srv, late)
}

// filesHolding returns the files under dir that contain s.
func filesHolding(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(s)) {
			found = append(found, path)
		}
		return nil
	})
	must(t, err)
	return found
}

func expectSecrets(t *testing.T, store *state.MemStore) {
	t.Helper()
	v, err := store.Volume("default", "data")
	must(t, err)
	expectEqual(t, v.Secrets["password"], volSecret)
	s, err := store.VolumeSnapshot("default", "s1")
	must(t, err)
	expectEqual(t, s.Secrets["token"], snapSecret)
	late, err := store.Volume("default", "late")
	must(t, err)
	expectEqual(t, late.Secrets["password"], lateSecret)
}

// TestServer_Keyring_NoSecretOnDisk runs a lifecycle with secrets, with
// and without a keyring, and greps every file of the data dir: with the
// keyring no file holds a secret (without it they do, which shows the
// grep finds them), and a restart with the keyring restores them.
func TestServer_Keyring_NoSecretOnDisk(t *testing.T) {
	for _, withKeyring := range []bool{true, false} {
		name := map[bool]string{true: "keyring", false: "no keyring"}[withKeyring]
		t.Run(name, func(t *testing.T) {
			dir, keyDir := t.TempDir(), t.TempDir()
			var k *sealed.Keyring
			if withKeyring {
				var err error
				k, err = sealed.Load(keyDir)
				must(t, err)
			}
			srv, store, err := startSealed(t, dir, k)
			must(t, err)
			sealedLifecycle(t, srv, true)
			expectSecrets(t, store) // the store holds clear values
			must(t, srv.Shutdown())
			for _, secret := range []string{volSecret, snapSecret, lateSecret} {
				found := filesHolding(t, dir, secret)
				if withKeyring && len(found) > 0 {
					t.Errorf("secret %s is in clear in %v", secret, found)
				}
				if !withKeyring && len(found) == 0 {
					t.Errorf("without a keyring secret %s is in no file: the grep is broken", secret)
				}
			}
			_, store, err = startSealed(t, dir, k)
			must(t, err)
			expectSecrets(t, store)
		})
	}
}

// TestServer_Keyring_WrongKeyRefusesStart restarts a server on its data
// dir with another keyring: Start fails with an error naming the cause,
// whether the state is in a snapshot or only in the log.
func TestServer_Keyring_WrongKeyRefusesStart(t *testing.T) {
	for _, snapshot := range []bool{true, false} {
		t.Run(map[bool]string{true: "snapshot", false: "log only"}[snapshot], func(t *testing.T) {
			dir := t.TempDir()
			k, err := sealed.Load(t.TempDir())
			must(t, err)
			srv, _, err := startSealed(t, dir, k)
			must(t, err)
			sealedLifecycle(t, srv, snapshot)
			must(t, srv.Shutdown())

			wrong, err := sealed.Load(t.TempDir())
			must(t, err)
			_, _, err = startSealed(t, dir, wrong)
			if !errors.Is(err, sealed.ErrWrongKey) {
				t.Fatalf("Start with the wrong keyring: %v; want sealed.ErrWrongKey", err)
			}
			_, _, err = startSealed(t, dir, nil)
			if !errors.Is(err, csi.ErrInvalidRequest) {
				t.Fatalf("Start without a keyring on sealed state: %v; want csi.ErrInvalidRequest", err)
			}
		})
	}
}

// TestServer_Keyring_Rotation adds a key after a lifecycle: the entries
// and snapshot sealed with key 1 still restore, new entries are sealed
// with key 2 (a keyring of key 1 alone no longer starts), and a server
// that turned the keyring on later still reads its clear entries.
func TestServer_Keyring_Rotation(t *testing.T) {
	dir, keyDir := t.TempDir(), t.TempDir()
	k1, err := sealed.Load(keyDir)
	must(t, err)
	srv, _, err := startSealed(t, dir, k1)
	must(t, err)
	sealedLifecycle(t, srv, true)
	must(t, srv.Shutdown())

	_, err = sealed.Rotate(keyDir)
	must(t, err)
	k2, err := sealed.Load(keyDir)
	must(t, err)
	srv, store, err := startSealed(t, dir, k2)
	must(t, err)
	expectSecrets(t, store)
	apply(t, srv, allocsCmd("a2"))
	must(t, srv.Shutdown())

	if _, _, err := startSealed(t, dir, k1); !errors.Is(err, sealed.ErrUnknownKey) {
		t.Fatalf("Start with the keyring before rotation: %v; want sealed.ErrUnknownKey", err)
	}

	clear := t.TempDir()
	srv, _, err = startSealed(t, clear, nil)
	must(t, err)
	sealedLifecycle(t, srv, false)
	must(t, srv.Shutdown())
	_, store, err = startSealed(t, clear, k2)
	must(t, err)
	expectSecrets(t, store)
}

// TestServer_Keyring_ForwardedWrites writes secrets through a follower
// of a three-server durable cluster sharing one keyring: every replica
// holds them in clear, and no server's data dir does.
func TestServer_Keyring_ForwardedWrites(t *testing.T) {
	k, err := sealed.Load(t.TempDir())
	must(t, err)
	c := newCluster(t, clusterOpts{durable: true, forward: true, keyring: k})
	leader := c.leader()
	f := c.followers(leader)[0]
	apply(t, f.srv, fingerprintCmd())
	vol := volumeCmd("data").(state.RegisterVolume)
	vol.Volume.Secrets = csi.Secrets{"password": volSecret}
	apply(t, f.srv, vol)
	want := indexes(t, leader.store)
	for _, m := range c.members {
		waitIndexes(t, m.store, want)
		v, err := m.store.Volume("default", "data")
		must(t, err)
		expectEqual(t, v.Secrets["password"], volSecret)
	}
	c.shutdownAll()
	for _, m := range c.members {
		if found := filesHolding(t, m.dir, volSecret); len(found) > 0 {
			t.Errorf("server %s: the secret is in clear in %v", m.id, found)
		}
	}
}
