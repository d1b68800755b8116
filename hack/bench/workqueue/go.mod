module hossted.local/bench/workqueue

go 1.25.0

require k8s.io/client-go v0.35.4

require (
	github.com/go-logr/logr v1.4.3 // indirect
	golang.org/x/time v0.9.0 // indirect
	k8s.io/apimachinery v0.35.4 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
	k8s.io/utils v0.0.0-20251002143259-bc988d571ff4 // indirect
)
