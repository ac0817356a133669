package csitest_test

import (
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csitest"
)

// scene is a monolith with every capability and one volume "v", with
// shortcuts for the lifecycle calls.
type scene struct {
	t       *testing.T
	p       *csitest.Plugin
	c       clients
	staging string
	target  string
	pc      map[string]string
}

func newScene(t *testing.T) *scene {
	p, c := start(t, fullConfig)
	p.AddVolume("v", 1<<20, nil)
	staging, target := paths(t)
	return &scene{t: t, p: p, c: c, staging: staging, target: target}
}

func (s *scene) controllerPublish(node string) error {
	resp, err := s.c.ctrl.ControllerPublishVolume(ctxT(s.t), &csipb.ControllerPublishVolumeRequest{VolumeId: "v", NodeId: node, VolumeCapability: mountCap(snw)})
	if node == csitest.DefaultNodeID && err == nil {
		s.pc = resp.GetPublishContext()
	}
	return err
}

func (s *scene) controllerUnpublish(node string) error {
	_, err := s.c.ctrl.ControllerUnpublishVolume(ctxT(s.t), &csipb.ControllerUnpublishVolumeRequest{VolumeId: "v", NodeId: node})
	return err
}

func (s *scene) stage(path string) error {
	_, err := s.c.node.NodeStageVolume(ctxT(s.t), &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: path, VolumeCapability: mountCap(snw), PublishContext: s.pc})
	return err
}

func (s *scene) unstage() error {
	_, err := s.c.node.NodeUnstageVolume(ctxT(s.t), &csipb.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: s.staging})
	return err
}

func (s *scene) publish(staging, target string) error {
	_, err := s.c.node.NodePublishVolume(ctxT(s.t), &csipb.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap(snw), PublishContext: s.pc})
	return err
}

func (s *scene) deleteVolume() error {
	_, err := s.c.ctrl.DeleteVolume(ctxT(s.t), &csipb.DeleteVolumeRequest{VolumeId: "v"})
	return err
}

// then runs steps that must succeed.
func (s *scene) then(steps ...func() error) {
	s.t.Helper()
	for i, step := range steps {
		if err := step(); err != nil {
			s.t.Fatalf("setup step %d: %v", i, err)
		}
	}
}

func TestChecker_Violations(t *testing.T) {
	me := csitest.DefaultNodeID
	tests := []struct {
		name  string
		setup func(s *scene)
		act   func(s *scene) error
		code  codes.Code
		rule  string
	}{
		{"publish before stage", func(s *scene) {
			s.then(func() error { return s.controllerPublish(me) })
		}, func(s *scene) error { return s.publish(s.staging, s.target) }, codes.FailedPrecondition, csitest.RulePublishBeforeStage},
		{"publish with the wrong staging path", func(s *scene) {
			s.then(func() error { return s.controllerPublish(me) }, func() error { return s.stage(s.staging) })
		}, func(s *scene) error { return s.publish(s.staging+"-other", s.target) }, codes.FailedPrecondition, csitest.RuleWrongStagingPath},
		{"unstage while published", func(s *scene) {
			s.then(func() error { return s.controllerPublish(me) }, func() error { return s.stage(s.staging) },
				func() error { return s.publish(s.staging, s.target) })
		}, (*scene).unstage, codes.OK, csitest.RuleUnstageWhilePublished},
		{"controller unpublish while staged", func(s *scene) {
			s.then(func() error { return s.controllerPublish(me) }, func() error { return s.stage(s.staging) })
		}, func(s *scene) error { return s.controllerUnpublish(me) }, codes.OK, csitest.RuleControllerUnpublishWhileNodeInUse},
		{"controller unpublish from every node while published", func(s *scene) {
			s.then(func() error { return s.controllerPublish(me) }, func() error { return s.stage(s.staging) },
				func() error { return s.publish(s.staging, s.target) })
		}, func(s *scene) error { return s.controllerUnpublish("") }, codes.OK, csitest.RuleControllerUnpublishWhileNodeInUse},
		{"delete while attached", func(s *scene) {
			s.then(func() error { return s.controllerPublish("n2") })
		}, (*scene).deleteVolume, codes.OK, csitest.RuleDeleteWhileInUse},
		{"single-node volume on a second node", func(s *scene) {
			s.then(func() error { return s.controllerPublish("n1") })
		}, func(s *scene) error { return s.controllerPublish("n2") }, codes.FailedPrecondition, csitest.RuleIncompatiblePublish},
		{"relative staging path", func(s *scene) {
			s.then(func() error { return s.controllerPublish(me) })
		}, func(s *scene) error { return s.stage("staging") }, codes.InvalidArgument, csitest.RuleRelativePath},
		{"relative target path", func(s *scene) {
			s.then(func() error { return s.controllerPublish(me) }, func() error { return s.stage(s.staging) })
		}, func(s *scene) error { return s.publish(s.staging, "target") }, codes.InvalidArgument, csitest.RuleRelativePath},
		{"missing target parent", func(s *scene) {
			s.then(func() error { return s.controllerPublish(me) }, func() error { return s.stage(s.staging) })
		}, func(s *scene) error {
			return s.publish(s.staging, filepath.Join(filepath.Dir(s.target), "no-such-dir", "t"))
		}, codes.FailedPrecondition, csitest.RuleMissingTargetParent},
		{"stage before controller publish", func(s *scene) {}, func(s *scene) error { return s.stage(s.staging) }, codes.OK, csitest.RuleMissingControllerPublish},
		{"publish context not passed through", func(s *scene) {
			s.then(func() error { return s.controllerPublish(me) })
			s.pc = map[string]string{"devicePath": "/dev/wrong"}
		}, func(s *scene) error { return s.stage(s.staging) }, codes.OK, csitest.RulePublishContextMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScene(t)
			tt.setup(s)
			s.p.RequireNoViolations(t) // the setup itself is clean
			wantCode(t, tt.act(s), tt.code)
			vs := s.p.Violations()
			if len(vs) != 1 || vs[0].Rule != tt.rule || vs[0].VolumeID != "v" || vs[0].Detail == "" {
				t.Fatalf("violations %v, want one %s on volume v", vs, tt.rule)
			}
			r := &fatalRecorder{TB: t}
			s.p.RequireNoViolations(r)
			if !r.failed || !strings.Contains(r.msg, tt.rule) || !strings.Contains(r.msg, "call log") {
				t.Errorf("RequireNoViolations failed=%v with %q; want the rule and the call log", r.failed, r.msg)
			}
			s.p.ResetViolations()
			s.p.RequireNoViolations(t)
		})
	}
}

func TestChecker_CleanLifecycle(t *testing.T) {
	p, c := start(t, fullConfig)
	lifecycle(t, p, c, nil)
	p.RequireNoViolations(t)
	p.RequireSequence(t,
		csitest.MethodCreateVolume, csitest.MethodControllerPublishVolume, csitest.MethodNodeStageVolume,
		csitest.MethodNodePublishVolume, csitest.MethodNodeUnpublishVolume, csitest.MethodNodeUnstageVolume,
		csitest.MethodControllerUnpublishVolume, csitest.MethodDeleteVolume)
	if vs := p.Volumes(); len(vs) != 0 {
		t.Errorf("volumes left: %v", vs)
	}
}

func TestChecker_ControllerUnpublishOtherNode(t *testing.T) {
	s := newScene(t)
	// Volume v is staged on this fake's node; detaching it from another
	// node breaks nothing.
	s.then(func() error { return s.controllerPublish(csitest.DefaultNodeID) }, func() error { return s.stage(s.staging) },
		func() error { return s.controllerUnpublish("n2") })
	s.p.RequireNoViolations(t)
}
