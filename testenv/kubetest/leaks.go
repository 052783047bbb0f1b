package kubetest

import "go.uber.org/goleak"

// ClientLoops are the goroutines a test of an API client may leave behind
// without leaking: client-go caches its HTTP transports process-wide (one
// per TLS configuration), and with them their idle connections' loops, and
// klog's flush daemon. Pass them to goleak.VerifyTestMain.
func ClientLoops() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	}
}
