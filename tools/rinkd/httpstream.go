package rinkd

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"github.com/rink-go/rink/tools/rinkd/rinkv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The HTTP routes of the server streams (http_rules.yaml) are served here,
// by the Server's methods directly, with the gateway's marshaler and in
// the gateway's format: one {"result": ...} object per line, {"error": ...}
// if the stream fails (with the HTTP status of its code if nothing was sent
// yet). Through the gateway they took a gRPC hop on loopback each way, on
// the path of every handover: the grant to the heir, and the end of a dead
// app's session.

// streamRoutes are the stream routes' methods.
var streamRoutes = map[string]string{"/v1/session": http.MethodPost, "/v1/await": http.MethodPost, "/v1/watch": http.MethodGet}

// httpStream is a server stream of messages T written to an HTTP response.
type httpStream[T proto.Message] struct {
	ctx     context.Context
	w       http.ResponseWriter
	rc      *http.ResponseController
	m       runtime.Marshaler
	started bool
}

var _ grpc.ServerStreamingServer[rinkv1.RoleEvent] = (*httpStream[*rinkv1.RoleEvent])(nil)

func (h *httpStream[T]) Send(msg T) error {
	if !h.started {
		h.w.Header().Set("Content-Type", h.m.ContentType(msg))
		h.started = true
	}
	b, err := h.m.Marshal(map[string]proto.Message{"result": msg})
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if _, err := h.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return h.rc.Flush()
}

// fail writes err as the stream's last line.
func (h *httpStream[T]) fail(err error) {
	st := status.Convert(err)
	if errors.Is(err, context.Canceled) {
		st = status.New(codes.Canceled, err.Error())
	}
	chunk := map[string]proto.Message{"error": st.Proto()}
	if !h.started {
		h.w.Header().Set("Content-Type", h.m.ContentType(chunk))
		h.w.WriteHeader(runtime.HTTPStatusFromCode(st.Code()))
		h.started = true
	}
	if b, err := h.m.Marshal(chunk); err == nil {
		_, _ = h.w.Write(append(b, '\n'))
	}
}

func (h *httpStream[T]) Context() context.Context     { return h.ctx }
func (h *httpStream[T]) SetHeader(metadata.MD) error  { return nil }
func (h *httpStream[T]) SendHeader(metadata.MD) error { return nil }
func (h *httpStream[T]) SetTrailer(metadata.MD)       {}
func (h *httpStream[T]) RecvMsg(any) error            { return io.EOF }
func (h *httpStream[T]) SendMsg(m any) error {
	msg, ok := m.(T)
	if !ok {
		return status.Errorf(codes.Internal, "rinkd: a stream of %T sent %T", *new(T), m)
	}
	return h.Send(msg)
}

// serveStream serves a stream route's request.
func (s *Server) serveStream(m runtime.Marshaler, w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if r.Method != streamRoutes[path] {
		w.Header().Set("Allow", streamRoutes[path])
		http.Error(w, `{"code":12,"message":"Method Not Allowed","details":[]}`, http.StatusMethodNotAllowed)
		return
	}
	ctx := r.Context()
	rc := http.NewResponseController(w)
	switch path {
	case "/v1/session":
		st := &httpStream[*rinkv1.SessionEvent]{ctx: ctx, w: w, rc: rc, m: m}
		req := &rinkv1.OpenSessionRequest{}
		if err := decodeBody(m, r, req); err != nil {
			st.fail(err)
		} else if err := s.OpenSession(req, st); err != nil {
			st.fail(err)
		}
	case "/v1/await":
		st := &httpStream[*rinkv1.RoleEvent]{ctx: ctx, w: w, rc: rc, m: m}
		req := &rinkv1.AwaitRoleRequest{}
		if err := decodeBody(m, r, req); err != nil {
			st.fail(err)
		} else if err := s.AwaitRole(req, st); err != nil {
			st.fail(err)
		}
	case "/v1/watch":
		st := &httpStream[*rinkv1.AssignmentEvent]{ctx: ctx, w: w, rc: rc, m: m}
		req := &rinkv1.WatchAssignmentsRequest{}
		if err := r.ParseForm(); err != nil {
			st.fail(status.Error(codes.InvalidArgument, err.Error()))
		} else if err := runtime.PopulateQueryParameters(req, r.Form, utilities.NewDoubleArray(nil)); err != nil {
			st.fail(status.Error(codes.InvalidArgument, err.Error()))
		} else if err := s.WatchAssignments(req, st); err != nil {
			st.fail(err)
		}
	}
}

// decodeBody reads a request's JSON body into req (an empty body is an
// empty request) and drains it: net/http notices a client's going away,
// and cancels the request's context, only once the body has been read.
func decodeBody(m runtime.Marshaler, r *http.Request, req proto.Message) error {
	defer func() { _, _ = io.Copy(io.Discard, r.Body) }()
	if err := m.NewDecoder(r.Body).Decode(req); err != nil && !errors.Is(err, io.EOF) {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	return nil
}
