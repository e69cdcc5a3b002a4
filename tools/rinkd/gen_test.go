package rinkd

import (
	"context"
	"embed"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/rink-go/rink/tools/rinkd/rinkv1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

//go:embed proto/rink/v1/rink.proto proto/rink/v1/rink_http.yaml
var protoFiles embed.FS

// TestGeneratedCodeIsCurrent compiles proto/rink/v1/rink.proto and compares
// it with the descriptor the generated code (rinkv1) embeds: a change to the
// .proto that was not followed by `go generate ./tools/rinkd/` fails here.
// (The HTTP routes of rink_http.yaml are checked by TestHTTPRoutes.)
func TestGeneratedCodeIsCurrent(t *testing.T) {
	// From the embedded copy, so that go test's cache knows of changes.
	open := func(path string) (io.ReadCloser, error) {
		return protoFiles.Open(filepath.ToSlash(filepath.Join("proto", path)))
	}
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: open})}
	files, err := c.Compile(context.Background(), "rink/v1/rink.proto")
	if err != nil {
		t.Fatalf("compiling the .proto: %v", err)
	}
	fromSource := protodesc.ToFileDescriptorProto(files[0])
	generated := protodesc.ToFileDescriptorProto(rinkv1.File_rink_v1_rink_proto)
	// The generated code keeps no comments: compare without them.
	fromSource.SourceCodeInfo, generated.SourceCodeInfo = nil, nil
	if !proto.Equal(fromSource, generated) {
		t.Fatalf("tools/rinkd/rinkv1 is not generated from the current proto/rink/v1/rink.proto: run `go generate ./tools/rinkd/` from the repository's root\nsource:    %v\ngenerated: %v",
			summary(fromSource), summary(generated))
	}
}

func summary(fd *descriptorpb.FileDescriptorProto) string {
	var b strings.Builder
	for _, m := range fd.MessageType {
		b.WriteString(m.GetName())
		b.WriteString("(")
		for _, f := range m.Field {
			b.WriteString(f.GetName() + " ")
		}
		b.WriteString(") ")
	}
	for _, s := range fd.Service {
		for _, m := range s.Method {
			b.WriteString(m.GetName() + " ")
		}
	}
	return b.String()
}
