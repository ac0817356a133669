package plugintest

import (
	"strings"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rawClients are plain gRPC clients of the plugin's sockets, for the
// requests csi/plugin refuses to send: the ones missing a required
// field. They connect on first use.
type rawClients struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (r *rawClients) conn(socket string) (*grpc.ClientConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[socket]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient("unix://"+socketPath(socket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	if r.conns == nil {
		r.conns = make(map[string]*grpc.ClientConn)
	}
	r.conns[socket] = c
	return c, nil
}

func (r *rawClients) controller(socket string) (csipb.ControllerClient, error) {
	c, err := r.conn(socket)
	if err != nil {
		return nil, err
	}
	return csipb.NewControllerClient(c), nil
}

func (r *rawClients) node(socket string) (csipb.NodeClient, error) {
	c, err := r.conn(socket)
	if err != nil {
		return nil, err
	}
	return csipb.NewNodeClient(c), nil
}

func (r *rawClients) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
}

// socketPath strips a unix: or unix:// prefix.
func socketPath(endpoint string) string {
	if p, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		return p
	}
	if p, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		return p
	}
	return endpoint
}

// unknownID returns an ID shaped like id that the plugin does not know:
// the last run of letters and digits is redrawn at random within the
// same character classes (a hex digit stays a hex digit), so a plugin
// that checks the format of its IDs still sees a well-formed one and
// must answer NotFound. A run of digits alone (a counter) also grows by
// nine digits, past any counter another run could have reached.
func unknownID(id string) string {
	b := []byte(id)
	end := len(b)
	for end > 0 && !alnum(b[end-1]) {
		end--
	}
	start := end
	for start > 0 && alnum(b[start-1]) {
		start--
	}
	if start == end {
		return id + "-" + randomHex(8)
	}
	digits := true
	for {
		r := randomBytes(end - start)
		for i := start; i < end; i++ {
			c, x := b[i], r[i-start]
			switch {
			case '0' <= c && c <= '9':
				b[i] = '0' + x%10
			case 'a' <= c && c <= 'f':
				b[i] = "0123456789abcdef"[x%16]
				digits = false
			case 'A' <= c && c <= 'F':
				b[i] = "0123456789ABCDEF"[x%16]
				digits = false
			case 'a' <= c && c <= 'z':
				b[i] = 'a' + x%26
				digits = false
			default:
				b[i] = 'A' + x%26
				digits = false
			}
		}
		if string(b) != id {
			break
		}
	}
	out := string(b)
	if digits {
		extra := randomBytes(9)
		for i := range extra {
			extra[i] = '0' + extra[i]%10
		}
		out = out[:end] + string(extra) + out[end:]
	}
	return out
}

func alnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
