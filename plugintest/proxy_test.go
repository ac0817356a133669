package plugintest_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "github.com/container-storage-interface/spec/lib/go/csi" // registers the CSI messages
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// breakFunc is one broken rule: it sees each call the proxy forwards,
// by bare method name, and may answer in the plugin's place (before
// returns a response or an error, and the call is not forwarded) or
// change the plugin's answer (after).
type breakFunc struct {
	// slow, when set, sees each call with its ctx first and may hold it.
	slow   func(ctx context.Context, method string, req proto.Message)
	before func(method string, req proto.Message) (proto.Message, error)
	after  func(method string, req, resp proto.Message, err error) (proto.Message, error)
}

// startProxy serves a gRPC proxy of the plugin at upstream on a new unix
// socket, with b applied to every call, until the test ends; it returns
// the socket. The proxy is real gRPC on both sides, so the harness sees
// a broken plugin exactly as it would a real one.
func startProxy(t testing.TB, upstream string, b breakFunc) string {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+upstream, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shortDir(t), "proxy.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		return forward(stream, conn, b)
	}))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		wg.Wait()
		_ = conn.Close()
	})
	return sock
}

// forward relays one unary call: the request and response types come
// from the CSI spec's registered descriptors.
func forward(stream grpc.ServerStream, conn *grpc.ClientConn, b breakFunc) error {
	full, _ := grpc.MethodFromServerStream(stream) // "/csi.v1.Controller/ListVolumes"
	svc, method, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return err
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(method))
	req, err := newMessage(md.Input())
	if err != nil {
		return err
	}
	if err := stream.RecvMsg(req); err != nil {
		return err
	}
	var resp proto.Message
	if b.slow != nil {
		b.slow(stream.Context(), method, req)
	}
	if b.before != nil {
		if resp, err = b.before(method, req); resp != nil || err != nil {
			if err != nil {
				return err
			}
			return stream.SendMsg(resp)
		}
	}
	if resp, err = newMessage(md.Output()); err != nil {
		return err
	}
	// The plugin finishes what it received, as a real one does when the
	// CO gives up waiting: the proxy does not pass the caller's deadline on.
	err = conn.Invoke(context.WithoutCancel(stream.Context()), full, req, resp)
	if err == nil && stream.Context().Err() != nil {
		err = status.FromContextError(stream.Context().Err()).Err()
	}
	if b.after != nil {
		resp, err = b.after(method, req, resp, err)
	}
	if err != nil {
		return err
	}
	return stream.SendMsg(resp)
}

func newMessage(d protoreflect.MessageDescriptor) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		return nil, err
	}
	return mt.New().Interface(), nil
}
