package rpcshim

import (
	"cmp"
	"context"

	"github.com/csikit/csikit/csi"
)

// Volume returns one volume, secrets removed. It asks the Authorizer
// for csi.PermVolumeRead in namespace before it reads, so a denied
// caller learns nothing about whether the volume exists.
func (s *Server) Volume(ctx context.Context, namespace, id string) (*csi.Volume, error) {
	if err := s.authorize(ctx, "read volume "+namespace+"/"+id, namespace, csi.PermVolumeRead); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, err := s.store.Volume(namespace, id)
	if err != nil {
		return nil, err
	}
	return withoutSecrets(v), nil
}

// Volumes returns the volumes of namespace ("" for all) whose ID starts
// with idPrefix, secrets removed. It asks the Authorizer for
// csi.PermVolumeRead in namespace, or in csi.AllNamespaces for "".
func (s *Server) Volumes(ctx context.Context, namespace, idPrefix string) ([]*csi.Volume, error) {
	if err := s.authorize(ctx, "list volumes", cmp.Or(namespace, csi.AllNamespaces), csi.PermVolumeRead); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	vols, err := s.store.Volumes(namespace, idPrefix)
	if err != nil {
		return nil, err
	}
	for _, v := range vols {
		withoutSecrets(v)
	}
	return vols, nil
}

// Plugin returns one plugin with its instances. It asks the Authorizer
// for csi.PermPluginRead with namespace "" (plugins are cluster-wide).
func (s *Server) Plugin(ctx context.Context, id string) (*csi.Plugin, error) {
	if err := s.authorize(ctx, "read plugin "+id, "", csi.PermPluginRead); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.store.Plugin(id)
}

// Plugins returns every plugin, sorted by ID. It asks the Authorizer
// for csi.PermPluginRead with namespace "".
func (s *Server) Plugins(ctx context.Context) ([]*csi.Plugin, error) {
	if err := s.authorize(ctx, "list plugins", "", csi.PermPluginRead); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.store.Plugins()
}

func withoutSecrets(v *csi.Volume) *csi.Volume {
	v.Secrets = nil
	return v
}
