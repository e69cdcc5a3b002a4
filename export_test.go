package rink

// EtcdEndpoint is the address of the embedded etcd the tests share, for the
// examples in package rink_test.
func EtcdEndpoint() string { return testEndpoint }
