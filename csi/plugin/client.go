package plugin

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/backoff"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/metrics"
)

// Defaults used when the corresponding Config field is zero.
const (
	// DefaultCallTimeout bounds one method call of a Client, retries and
	// backoff waits included. Two minutes leaves room for slow storage
	// back ends (attaching a cloud disk, formatting a file system) while
	// still ending a call to a plugin that hangs.
	DefaultCallTimeout = 2 * time.Minute
	// DefaultMaxRetries is how many times a call is retried after a
	// Retryable failure. Three retries with the default backoff policy
	// span under a second, enough to ride out a plugin restart; longer
	// waits belong to the caller's own retry loop (the claim release
	// worker, the mounter), which keeps its state between attempts.
	DefaultMaxRetries = 3
)

// maxSocketPath is the longest unix socket path the kernel accepts
// (sun_path holds 108 bytes including the terminating NUL).
const maxSocketPath = 107

// Config configures a Client.
type Config struct {
	// Endpoint is the plugin's unix socket: an absolute path
	// ("/csi/csi.sock") or a unix URL ("unix:///csi/csi.sock"). Required.
	Endpoint string
	// Logger receives a trace line per request and response (secrets
	// stripped) and a debug line per failed attempt. Nil means no logging.
	Logger hclog.Logger
	// Clock times the backoff between retries; nil means clock.Real.
	Clock clock.Clock
	// CallTimeout bounds each method call, retries included; 0 means
	// DefaultCallTimeout. The caller's ctx may end the call sooner.
	CallTimeout time.Duration
	// MaxRetries is how many times a call is retried after a Retryable
	// failure (Unavailable, ResourceExhausted, Aborted); 0 means
	// DefaultMaxRetries and a negative value disables retries.
	MaxRetries int
	// Backoff spaces the retries; the zero value is backoff's default
	// (100ms doubling up to 30s, 20% jitter).
	Backoff backoff.Policy
	// MetricSink receives a latency sample per call attempt by method
	// and gRPC code (metrics.PluginRPCLatency); nil emits nothing.
	MetricSink metrics.Sink
	// MetricLabels are added to every metric the client emits, such as
	// the plugin's ID (fingerprint.Manager sets "plugin"). Keep them
	// bounded.
	MetricLabels []metrics.Label
}

// Client is a gRPC client of one CSI plugin socket. It implements
// IdentityClient, ControllerClient and NodeClient. Its methods are safe
// for concurrent use; Close ends them.
type Client struct {
	conn       *grpc.ClientConn
	socket     string
	logger     hclog.Logger
	clock      clock.Clock
	timeout    time.Duration
	maxRetries int
	backoff    backoff.Policy
	callOpts   []grpc.CallOption
}

var (
	_ IdentityClient   = (*Client)(nil)
	_ ControllerClient = (*Client)(nil)
	_ NodeClient       = (*Client)(nil)
)

// New validates cfg and returns a Client for the plugin at cfg.Endpoint.
// It does not connect: the first call does, and waits (bounded by its ctx
// and CallTimeout) for a socket that does not exist yet.
func New(cfg Config) (*Client, error) {
	socket, err := socketPath(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.CallTimeout < 0 {
		return nil, fmt.Errorf("%w: plugin client for %s: call timeout %s is negative; use 0 for the default (%s)",
			csi.ErrInvalidRequest, socket, cfg.CallTimeout, DefaultCallTimeout)
	}
	c := &Client{
		socket:     socket,
		logger:     cfg.Logger,
		clock:      clock.Or(cfg.Clock),
		timeout:    cfg.CallTimeout,
		maxRetries: cfg.MaxRetries,
		backoff:    cfg.Backoff,
		// WaitForReady makes a call wait for the socket to appear (or
		// for a restarted plugin to listen again) instead of failing at
		// once; ctx and CallTimeout bound the wait.
		callOpts: []grpc.CallOption{grpc.WaitForReady(true)},
	}
	if c.logger == nil {
		c.logger = hclog.NewNullLogger()
	}
	if c.timeout == 0 {
		c.timeout = DefaultCallTimeout
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = DefaultMaxRetries
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if cfg.MetricSink != nil {
		dialOpts = append(dialOpts, grpc.WithChainUnaryInterceptor(metricsInterceptor(cfg.MetricSink, cfg.MetricLabels)))
	}
	conn, err := grpc.NewClient("unix://"+socket, append(dialOpts,
		// A local socket is either there or not: reconnect quickly when a
		// plugin (re)starts rather than after grpc's default of up to
		// two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: grpcbackoff.Config{
				BaseDelay:  50 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   time.Second,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("plugin client for %s: %w", socket, err)
	}
	c.conn = conn
	return c, nil
}

// socketPath turns an endpoint into an absolute socket path.
func socketPath(endpoint string) (string, error) {
	p := endpoint
	switch {
	case endpoint == "":
		return "", fmt.Errorf("%w: plugin endpoint is empty; give the plugin's unix socket as an absolute path or unix:///path", csi.ErrInvalidRequest)
	case strings.HasPrefix(endpoint, "unix://"):
		p = strings.TrimPrefix(endpoint, "unix://")
	case strings.HasPrefix(endpoint, "unix:"):
		p = strings.TrimPrefix(endpoint, "unix:")
	case strings.Contains(endpoint, "://"):
		return "", fmt.Errorf("%w: plugin endpoint %q is not a unix socket; CSI plugins listen on a unix socket (unix:///path)", csi.ErrInvalidRequest, endpoint)
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: plugin endpoint %q is not an absolute socket path; use /path or unix:///path", csi.ErrInvalidRequest, endpoint)
	}
	if len(p) > maxSocketPath {
		return "", fmt.Errorf("%w: plugin socket path %q is %d bytes long, unix sockets allow %d; use a shorter directory",
			csi.ErrInvalidRequest, p, len(p), maxSocketPath)
	}
	return p, nil
}

// Endpoint returns the plugin's socket path.
func (c *Client) Endpoint() string { return c.socket }

// Close closes the connection. Calls in flight fail with a Canceled
// RPCError; later calls fail at once.
func (c *Client) Close() error { return c.conn.Close() }

// call sends req to the method named full ("/csi.v1.Node/NodeStageVolume"),
// retrying Retryable failures, and fills resp. secrets are the request's
// secrets, scrubbed from any error message the plugin returns. Every error
// it returns is a *csi.RPCError.
func (c *Client) call(ctx context.Context, full string, secrets csi.Secrets, req, resp proto.Message) error {
	name := full[strings.LastIndexByte(full, '/')+1:]
	// A caller's deadline that comes before CallTimeout already bounds
	// the call. csikit's own callers normally pass one (a step, a
	// fingerprint, a claim release); wrapping their ctx again would only
	// add a context's allocations and cancel bookkeeping to every call,
	// and a level to each ctx.Value lookup grpc makes.
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > c.timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	trace := c.logger.IsTrace()
	if trace {
		c.logger.Trace("plugin call", "method", name, "request", protosanitizer.StripSecrets(req).String())
	}
	for attempt := 0; ; attempt++ {
		err := c.conn.Invoke(ctx, full, req, resp, c.callOpts...)
		if err == nil {
			if trace {
				c.logger.Trace("plugin reply", "method", name, "response", protosanitizer.StripSecrets(resp).String())
			}
			return nil
		}
		rerr := rpcError(ctx, name, err, secrets)
		class := rerr.ErrorClass()
		debug := c.logger.IsDebug()
		if debug {
			c.logger.Debug("plugin call failed", "method", name, "attempt", attempt+1,
				"code", rerr.Code.String(), "class", class.String(), "message", rerr.Message)
		}
		if class != csi.ClassRetryable || attempt >= c.maxRetries {
			return rerr
		}
		delay := c.backoff.Delay(attempt + 1)
		if debug {
			c.logger.Debug("retrying plugin call", "method", name, "delay", delay)
		}
		if werr := clock.Sleep(ctx, c.clock, delay); werr != nil {
			// The last attempt did not happen (its class is Retryable);
			// keep its code and make the ctx error reachable too.
			rerr.Err = &cause{err: rerr.Err, ctx: werr}
			return rerr
		}
	}
}

// rpcError turns an error from grpc into a *csi.RPCError whose message
// holds no secret value.
func rpcError(ctx context.Context, method string, err error, secrets csi.Secrets) *csi.RPCError {
	st, _ := status.FromError(err)
	code := csi.Code(st.Code())
	msg := scrub(st.Message(), secrets)
	var cerr error = err
	if msg != st.Message() {
		cerr = status.Error(st.Code(), msg)
	}
	if code == csi.CodeDeadlineExceeded || code == csi.CodeCanceled {
		if ctxErr := contextError(ctx); ctxErr != nil {
			cerr = &cause{err: cerr, ctx: ctxErr}
		}
	}
	return &csi.RPCError{
		Method:  method,
		Code:    code,
		Message: msg,
		Err:     cerr,
	}
}

// contextError returns ctx's error, or context.DeadlineExceeded when its
// deadline has passed but ctx's timer has not fired yet: the plugin sees
// the deadline too (grpc sends it, rounded up) and its answer can arrive
// first.
func contextError(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// cause is the Err of an RPCError that also ended because of its context:
// errors.Is finds the context error, status.Code the gRPC status.
type cause struct {
	err error // from grpc, carries the status
	ctx error // context.Canceled or context.DeadlineExceeded
}

func (c *cause) Error() string { return c.err.Error() }

// Unwrap exposes both errors to errors.Is and errors.As.
func (c *cause) Unwrap() []error { return []error{c.err, c.ctx} }

// scrub replaces every secret value found in msg: a plugin may echo its
// request in an error message. The longest values go first, so a secret
// that holds another one is redacted whole rather than left with its
// remainder showing.
func scrub(msg string, secrets csi.Secrets) string {
	var found []string
	for _, v := range secrets {
		if v != "" && strings.Contains(msg, v) {
			found = append(found, v)
		}
	}
	slices.SortFunc(found, func(a, b string) int { return len(b) - len(a) })
	for _, v := range found {
		msg = strings.ReplaceAll(msg, v, "[redacted]")
	}
	return msg
}
