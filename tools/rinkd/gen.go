package rinkd

// The Go code of the API (rinkv1) is generated from proto/rink/v1/rink.proto by buf
// with these plugins, at these versions; TestGeneratedCodeIsCurrent fails
// when it is stale.
//go:generate go install github.com/bufbuild/buf/cmd/buf@v1.75.0
//go:generate go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11
//go:generate go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
//go:generate go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@v2.29.0
//go:generate sh -c "cd proto && PATH=$(go env GOPATH)/bin:$PATH buf generate"
