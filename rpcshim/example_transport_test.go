package rpcshim_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

type pingRequest struct{ From string }
type pingReply struct{ Answer string }

// A node serves typed methods through a Mux; the server calls them by
// node ID. A node's error keeps its sentinel and class on the server.
func ExampleInmemTransport() {
	node := rpcshim.NewMux()
	rpcshim.Handle(node, "Ping", func(_ context.Context, req *pingRequest) (*pingReply, error) {
		return &pingReply{Answer: "pong to " + req.From}, nil
	})
	rpcshim.Handle(node, "Mount", func(context.Context, *struct{}) (*struct{}, error) {
		return nil, fmt.Errorf("mount on node n1: %w", csi.ErrPluginNotFound)
	})

	tr := rpcshim.NewInmemTransport()
	tr.Register("n1", node)
	ctx := context.Background()

	var reply pingReply
	if err := tr.Call(ctx, "n1", "Ping", &pingRequest{From: "server"}, &reply); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(reply.Answer)

	err := tr.Call(ctx, "n1", "Mount", struct{}{}, nil)
	fmt.Println(err, "| plugin missing:", errors.Is(err, csi.ErrPluginNotFound), "| retry:", csi.IsRetryable(err))

	tr.SetDown("n1", true)
	err = tr.Call(ctx, "n1", "Ping", &pingRequest{From: "server"}, &reply)
	fmt.Println("node not ready:", errors.Is(err, csi.ErrNodeNotReady), "| retry:", csi.IsRetryable(err))
	// Output:
	// pong to server
	// mount on node n1: plugin not found | plugin missing: true | retry: true
	// node not ready: true | retry: true
}

// A node agent serves its Mux on a unix socket; the server reaches it by
// resolving the node ID to that socket.
func ExampleGRPCTransport() {
	dir, err := os.MkdirTemp("", "rpcshim")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "node.sock")

	// On the node.
	mux := rpcshim.NewMux()
	rpcshim.Handle(mux, "Ping", func(_ context.Context, req *pingRequest) (*pingReply, error) {
		return &pingReply{Answer: "pong to " + req.From}, nil
	})
	lis, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := rpcshim.NewGRPCNodeServer(rpcshim.GRPCNodeServerConfig{Handler: mux, Insecure: true}) // see GRPCNodeServerConfig.TLS
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	defer func() { stop(); <-served }()

	// On the server.
	tr, err := rpcshim.NewGRPCTransport(rpcshim.GRPCTransportConfig{
		Resolve: func(_ context.Context, nodeID string) (string, error) {
			if nodeID != "n1" {
				return "", fmt.Errorf("%w: no address for node %s", csi.ErrNodeNotReady, nodeID)
			}
			return "unix://" + sock, nil
		},
		Insecure: true, // a private socket; see GRPCTransportConfig.TLS
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()

	var reply pingReply
	if err := tr.Call(context.Background(), "n1", "Ping", &pingRequest{From: "server"}, &reply); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(reply.Answer)

	err = tr.Call(context.Background(), "n1", "Unmount", struct{}{}, nil)
	fmt.Println("not supported:", errors.Is(err, csi.ErrNotSupported), "| class:", csi.Classify(err))
	// Output:
	// pong to server
	// not supported: true | class: final
}

// EncodeError and WireError.Err are what a host's own transport uses to
// carry a node's error; a plugin's gRPC code survives, so teardown logic
// works on the server.
func ExampleEncodeError() {
	onNode := fmt.Errorf("unpublish volume v1: %w",
		&csi.RPCError{Method: "NodeUnpublishVolume", Code: csi.CodeNotFound, Message: "not published"})
	w := rpcshim.EncodeError(onNode)
	fmt.Printf("%+v\n", *w)

	onServer := w.Err()
	fmt.Println(onServer)
	fmt.Println(csi.CodeOf(onServer), csi.TeardownDone(onServer), csi.Classify(onServer))
	// Output:
	// {Sentinel: Class:final Code:NotFound Method:NodeUnpublishVolume RPCMessage:not published Message:unpublish volume v1: NodeUnpublishVolume: NotFound: not published}
	// unpublish volume v1: NodeUnpublishVolume: NotFound: not published
	// NotFound true final
}
