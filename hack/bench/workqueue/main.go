// Baseline for pkg/workqueue's throughput benchmark: the same workload
// against client-go's workqueue. Built from the Go module proxy by
// hack/bench-machinery.sh; not part of the product.
//
// Workload: 10,000 distinct keys are queued; each of W workers loops
// Get -> Done -> Add(same key) until 1,000,000 cycles are done in total.
// Prints one JSON line per worker count.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
)

func run(workers, keys, cycles int) float64 {
	q := workqueue.NewTyped[string]()
	names := make([]string, keys)
	for i := range names {
		names[i] = "namespace/object-" + strconv.Itoa(i)
	}
	start := time.Now()
	for _, k := range names {
		q.Add(k)
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				item, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Done(item)
				if done.Add(1) >= int64(cycles) {
					q.ShutDown()
					return
				}
				q.Add(item)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds()
}

func main() {
	workers := flag.String("workers", "1,4,16", "worker counts")
	keys := flag.Int("keys", 10000, "distinct keys")
	cycles := flag.Int("cycles", 1000000, "add/get/done cycles per run")
	flag.Parse()
	for _, w := range strings.Split(*workers, ",") {
		n, err := strconv.Atoi(w)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad worker count:", w)
			os.Exit(2)
		}
		run(n, *keys, *cycles/10) // warm-up
		ops := run(n, *keys, *cycles)
		out, _ := json.Marshal(map[string]any{"impl": "client-go", "workers": n, "keys": *keys, "cycles": *cycles, "ops_per_sec": ops})
		fmt.Println(string(out))
	}
}
