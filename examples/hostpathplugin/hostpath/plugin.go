package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Plugin is one hostpath CSI plugin process: its Config, resolved, and the
// services it serves. Create it with New; serve with Run or Serve.
type Plugin struct {
	cfg Config
	// mount is the resolved mount method (never MountAuto) and
	// mountNote, when set, why MountAuto fell back to symlinks.
	mount     MountMethod
	mountNote string
	serving   atomic.Bool
}

// New validates cfg, fills its defaults and resolves the mount method:
// for MountAuto and MountBind it tries a bind mount in a temporary
// directory (see CanBindMount). With MountBind, a failed probe is an
// error; with MountAuto it selects MountSymlink and Serve logs why. New
// starts no goroutine and does not touch DataDir.
func New(cfg Config) (*Plugin, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Plugin{cfg: c, mount: c.Mount}
	if !c.Mode.hasNode() {
		return p, nil
	}
	switch c.Mount {
	case MountBind:
		if err := CanBindMount(); err != nil {
			return nil, configError("mount method bind does not work here (%v): run the plugin as root, or use the symlink mount method", err)
		}
	case MountAuto:
		if err := CanBindMount(); err != nil {
			p.mount = MountSymlink
			p.mountNote = err.Error()
		} else {
			p.mount = MountBind
		}
	}
	return p, nil
}

// MountMethod returns the mount method the node service uses: MountBind or
// MountSymlink once MountAuto is resolved. In ModeController it is the
// configured value, unused.
func (p *Plugin) MountMethod() MountMethod { return p.mount }

// Config returns the plugin's configuration with defaults filled in.
func (p *Plugin) Config() Config { return p.cfg }

// Run listens on Config.Endpoint and serves until ctx ends (see Serve). A
// stale socket file left by a crashed plugin is replaced; a socket that
// another process still answers on is an error. Run removes its socket
// when it returns.
func (p *Plugin) Run(ctx context.Context) error {
	if p.cfg.Endpoint == "" {
		return configError("Endpoint is required by Run: give a unix socket path")
	}
	path, err := SocketPath(p.cfg.Endpoint)
	if err != nil {
		return err
	}
	if err := removeStaleSocket(path); err != nil {
		return err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	defer func() {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			p.cfg.Logger.Warn("could not remove the socket", "path", path, "error", err)
		}
	}()
	return p.Serve(ctx, lis)
}

// Serve serves the CSI services of the plugin's mode on lis until ctx
// ends, then stops gracefully: calls in flight get Config.ShutdownTimeout
// to finish before they are cut. Serve closes lis. It returns nil after a
// stop caused by ctx, and an error if the data dir cannot be opened
// (another plugin holds its state, a state file is corrupt) or serving
// fails. One Plugin serves at most once at a time; a Plugin may serve
// again after Serve returns, reloading its state from DataDir.
func (p *Plugin) Serve(ctx context.Context, lis net.Listener) (err error) {
	if !p.serving.CompareAndSwap(false, true) {
		_ = lis.Close()
		return errors.New("hostpath plugin is already serving: one Plugin serves one listener at a time")
	}
	defer p.serving.Store(false)

	log := p.cfg.Logger
	var ctrl *controller
	var node *nodeService
	defer func() {
		if ctrl != nil {
			ctrl.close()
		}
		if node != nil {
			node.close()
		}
	}()
	if err := os.MkdirAll(filepath.Join(p.cfg.DataDir, volumesDirName), 0o755); err != nil {
		_ = lis.Close()
		return fmt.Errorf("create data dir: %w", err)
	}
	if p.cfg.Mode.hasController() {
		if ctrl, err = openController(p.cfg); err != nil {
			_ = lis.Close()
			return err
		}
	}
	if p.cfg.Mode.hasNode() {
		if node, err = openNode(p.cfg, p.mount); err != nil {
			_ = lis.Close()
			return err
		}
	}

	log.Info("hostpath CSI plugin serving", "name", p.cfg.Name, "version", p.cfg.Version,
		"endpoint", lis.Addr().String(), "mode", p.cfg.Mode, "node_id", p.cfg.NodeID,
		"data_dir", p.cfg.DataDir, "controller_publish", p.cfg.ControllerPublish,
		"staging", p.cfg.Staging, "mount", p.mount, "max_volumes", p.cfg.MaxVolumes,
		"topology", p.cfg.topologyString(), "capacity", p.cfg.Capacity)
	if p.mountNote != "" {
		log.Warn("bind mounts are not available, so volumes are published as symbolic links to their directories (read-only publishes are NOT enforced); run as root for bind mounts",
			"reason", p.mountNote)
	}

	srv := grpc.NewServer(grpc.UnaryInterceptor(p.logCalls))
	csipb.RegisterIdentityServer(srv, &identity{p: p})
	if ctrl != nil {
		csipb.RegisterControllerServer(srv, ctrl)
	}
	if node != nil {
		csipb.RegisterNodeServer(srv, node)
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve CSI: %w", err)
	case <-ctx.Done():
	}

	p.stop(srv)
	<-served // grpc.ErrServerStopped or nil after a stop
	log.Info("stopped")
	return nil
}

// stop stops srv gracefully, waiting Config.ShutdownTimeout for the
// calls in flight before it cuts them.
func (p *Plugin) stop(srv *grpc.Server) {
	log := p.cfg.Logger
	log.Info("stopping: waiting for calls in flight", "timeout", p.cfg.ShutdownTimeout)
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(p.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		log.Warn("calls still in flight after the shutdown timeout; cutting them", "timeout", p.cfg.ShutdownTimeout)
		srv.Stop()
		<-stopped
	}
}

// removeStaleSocket clears path for a new listener if it is a socket no
// process answers on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect endpoint %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("endpoint %s exists and is not a socket; refusing to replace it: remove it or choose another endpoint", path)
	}
	if c, err := net.Dial("unix", path); err == nil {
		_ = c.Close()
		return fmt.Errorf("endpoint %s is in use by another process; stop it or choose another endpoint", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// logCalls logs each call at debug level with its secrets stripped, and
// each failure at info level. Error messages never carry secrets: no
// handler puts a request's secrets in one.
func (p *Plugin) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	log := p.cfg.Logger
	if log.IsDebug() {
		log.Debug("call", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req).String())
	}
	resp, err := handler(ctx, req)
	if err != nil {
		s := status.Convert(err)
		log.Info("call failed", "method", info.FullMethod, "code", s.Code().String(), "message", s.Message())
	} else if log.IsDebug() {
		log.Debug("reply", "method", info.FullMethod, "response", protosanitizer.StripSecrets(resp).String())
	}
	return resp, err
}
