package csitest

import (
	"fmt"
	"strings"
	"testing"
)

// Rules the lifecycle checker reports, one per kind of mistake a CO can
// make. Violation.Rule holds one of them.
const (
	// RulePublishBeforeStage: NodePublishVolume of a volume that is not
	// staged while the plugin advertises STAGE_UNSTAGE_VOLUME. The call
	// fails with FailedPrecondition.
	RulePublishBeforeStage = "node-publish-before-stage"
	// RuleWrongStagingPath: NodePublishVolume with a staging_target_path
	// other than the one the volume is staged at. The call fails with
	// FailedPrecondition.
	RuleWrongStagingPath = "node-publish-wrong-staging-path"
	// RuleUnstageWhilePublished: NodeUnstageVolume while a target of the
	// volume is still published. The call succeeds.
	RuleUnstageWhilePublished = "node-unstage-while-published"
	// RuleControllerUnpublishWhileNodeInUse: ControllerUnpublishVolume
	// from this fake's node while the volume is still staged or published
	// there. The call succeeds.
	RuleControllerUnpublishWhileNodeInUse = "controller-unpublish-while-node-in-use"
	// RuleDeleteWhileInUse: DeleteVolume while the volume is attached,
	// staged or published. The call succeeds and the volume is gone.
	RuleDeleteWhileInUse = "delete-while-in-use"
	// RuleIncompatiblePublish: ControllerPublishVolume of a single-node
	// volume to a second node. The call fails with FailedPrecondition, as
	// the spec requires.
	RuleIncompatiblePublish = "incompatible-controller-publish"
	// RuleRelativePath: NodeStageVolume or NodePublishVolume with a
	// staging or target path that is not absolute. The call fails with
	// InvalidArgument and touches no file.
	RuleRelativePath = "path-not-absolute"
	// RuleMissingTargetParent: NodePublishVolume whose target's parent
	// directory does not exist (the CO must create it). The call fails
	// with FailedPrecondition.
	RuleMissingTargetParent = "target-parent-missing"
	// RuleMissingControllerPublish: on a monolith that advertises
	// PUBLISH_UNPUBLISH_VOLUME, NodeStageVolume or NodePublishVolume of a
	// volume not ControllerPublished to this node. The call proceeds.
	RuleMissingControllerPublish = "node-call-before-controller-publish"
	// RulePublishContextMismatch: on a monolith that advertises
	// PUBLISH_UNPUBLISH_VOLUME, NodeStageVolume or NodePublishVolume with
	// a publish_context other than the one ControllerPublishVolume
	// returned. The call proceeds.
	RulePublishContextMismatch = "publish-context-mismatch"
	// RulePanic: a handler or hook panicked; the call answered Internal.
	RulePanic = "handler-panic"
)

// Violation is one lifecycle rule a CO broke (or a panic in the fake).
type Violation struct {
	Method   string
	VolumeID string
	Rule     string
	Detail   string
}

func (v Violation) String() string {
	if v.VolumeID == "" {
		return fmt.Sprintf("%s: %s: %s", v.Method, v.Rule, v.Detail)
	}
	return fmt.Sprintf("%s volume %q: %s: %s", v.Method, v.VolumeID, v.Rule, v.Detail)
}

// violate records a violation; p.mu must not be held.
func (p *Plugin) violate(method, volumeID, rule, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.violateLocked(method, volumeID, rule, format, args...)
}

func (p *Plugin) violateLocked(method, volumeID, rule, format string, args ...any) {
	v := Violation{Method: method, VolumeID: volumeID, Rule: rule, Detail: fmt.Sprintf(format, args...)}
	p.violations = append(p.violations, v)
	p.log.Warn("csitest: lifecycle violation", "method", method, "volume", volumeID, "rule", rule, "detail", v.Detail)
}

// Violations returns a copy of the recorded violations in order.
func (p *Plugin) Violations() []Violation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Violation(nil), p.violations...)
}

// ResetViolations forgets the recorded violations.
func (p *Plugin) ResetViolations() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.violations = nil
}

// RequireNoViolations fails the test if any violation was recorded,
// listing them all and the call log.
func (p *Plugin) RequireNoViolations(t testing.TB) {
	t.Helper()
	vs := p.Violations()
	if len(vs) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "csitest: %d lifecycle violation(s):\n", len(vs))
	for i, v := range vs {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, v)
	}
	b.WriteString(formatCalls(p.Calls()))
	t.Fatal(b.String())
}
