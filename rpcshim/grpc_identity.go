package rpcshim

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/csikit/csikit/csi"
)

// ClusterTokenMetadataKey is the gRPC metadata key that carries the
// per-cluster token from a GRPCTransport to a GRPCNodeServer.
const ClusterTokenMetadataKey = "csikit-cluster-token"

// MinClusterTokenLen is the shortest cluster token the gRPC transport
// accepts. Generate tokens at random (crypto/rand), 32 bytes or more.
const MinClusterTokenLen = 16

// nodeGuard is how a GRPCNodeServer tells a server's call from anyone
// else's: a verified client certificate, the cluster token, or neither
// (Insecure).
type nodeGuard struct {
	mtls  bool
	token []byte
}

// guard validates the identity fields of cfg. Exactly one choice must be
// made: TLS and/or ClusterToken, or Insecure.
func (cfg *GRPCNodeServerConfig) guard() (nodeGuard, error) {
	secure := cfg.TLS != nil || cfg.ClusterToken != ""
	switch {
	case secure && cfg.Insecure:
		return nodeGuard{}, fmt.Errorf("%w: GRPCNodeServerConfig sets Insecure together with TLS or ClusterToken; choose one", csi.ErrInvalidRequest)
	case !secure && !cfg.Insecure:
		return nodeGuard{}, fmt.Errorf("%w: GRPCNodeServerConfig has no server identity to check: set TLS (mutual TLS, preferred), ClusterToken, or Insecure for tests on a private socket", csi.ErrInvalidRequest)
	case cfg.TLS != nil && cfg.TLS.ClientCAs == nil:
		return nodeGuard{}, fmt.Errorf("%w: GRPCNodeServerConfig.TLS has no ClientCAs, so client certificates cannot be verified; set the CA that signs the servers' certificates", csi.ErrInvalidRequest)
	case cfg.ClusterToken != "" && len(cfg.ClusterToken) < MinClusterTokenLen:
		return nodeGuard{}, fmt.Errorf("%w: GRPCNodeServerConfig.ClusterToken is shorter than %d bytes; generate a random one", csi.ErrInvalidRequest, MinClusterTokenLen)
	}
	g := nodeGuard{mtls: cfg.TLS != nil}
	if cfg.ClusterToken != "" {
		g.token = []byte(cfg.ClusterToken)
	}
	return g, nil
}

// serverOption is the credentials option Serve adds for mutual TLS.
func serverTLSOption(c *tls.Config) grpc.ServerOption {
	c = c.Clone()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	return grpc.Creds(credentials.NewTLS(c))
}

// check refuses a call that does not carry the server's identity. It
// runs in every call, so a GRPCNodeServer registered on the host's own
// *grpc.Server checks too (that server must then use TLS credentials
// that request client certificates for the mTLS check to pass).
func (g nodeGuard) check(ctx context.Context) error {
	if g.mtls {
		p, ok := peer.FromContext(ctx)
		var info credentials.TLSInfo
		if ok {
			info, ok = p.AuthInfo.(credentials.TLSInfo)
		}
		if !ok || len(info.State.VerifiedChains) == 0 {
			return fmt.Errorf("%w: node call refused: the caller presented no client certificate signed by the cluster CA", csi.ErrPermissionDenied)
		}
	}
	if g.token != nil {
		md, _ := metadata.FromIncomingContext(ctx)
		got := md.Get(ClusterTokenMetadataKey)
		if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), g.token) != 1 {
			return fmt.Errorf("%w: node call refused: the caller did not present the cluster token", csi.ErrPermissionDenied)
		}
	}
	return nil
}

// peerAddr names the caller of ctx for a log line.
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}

// dialIdentity validates the identity fields of cfg and returns the
// dial options that present the server's identity.
func (cfg *GRPCTransportConfig) dialIdentity() ([]grpc.DialOption, error) {
	secure := cfg.TLS != nil || cfg.ClusterToken != ""
	switch {
	case secure && cfg.Insecure:
		return nil, fmt.Errorf("%w: GRPCTransportConfig sets Insecure together with TLS or ClusterToken; choose one", csi.ErrInvalidRequest)
	case !secure && !cfg.Insecure:
		return nil, fmt.Errorf("%w: GRPCTransportConfig presents no identity to the nodes: set TLS (a client certificate and RootCAs, preferred), ClusterToken, or Insecure for tests on a private socket", csi.ErrInvalidRequest)
	case cfg.ClusterToken != "" && len(cfg.ClusterToken) < MinClusterTokenLen:
		return nil, fmt.Errorf("%w: GRPCTransportConfig.ClusterToken is shorter than %d bytes; generate a random one", csi.ErrInvalidRequest, MinClusterTokenLen)
	}
	var opts []grpc.DialOption
	if cfg.TLS != nil {
		c := cfg.TLS.Clone()
		if c.MinVersion < tls.VersionTLS12 {
			c.MinVersion = tls.VersionTLS12
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(c)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if cfg.ClusterToken != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{token: cfg.ClusterToken, secure: cfg.TLS != nil}))
	}
	return opts, nil
}

// tokenCreds sends the cluster token with every call.
type tokenCreds struct {
	token  string
	secure bool
}

var _ credentials.PerRPCCredentials = tokenCreds{}

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{ClusterTokenMetadataKey: c.token}, nil
}

// RequireTransportSecurity is false without TLS so that a token alone
// works on a unix socket; over a network, use it with TLS.
func (c tokenCreds) RequireTransportSecurity() bool { return c.secure }
