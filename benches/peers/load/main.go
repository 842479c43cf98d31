// Command peers-load is the load generator of `lineage bench peers` (issue 14) for the peers
// with a Go client: etcd (a put per registration, through the official client v3) and Restate
// (an HTTP call to the parent handler through the ingress). It runs --ops operations from
// --clients concurrent callers after --warmup of them and prints one JSON line:
// {"n", "wall_s", "latencies_us": [...]} (or {"error"}). Every call has a deadline.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type result struct {
	N           int     `json:"n"`
	WallS       float64 `json:"wall_s"`
	LatenciesUs []int64 `json:"latencies_us"`
}

func fail(err error) {
	line, _ := json.Marshal(map[string]string{"error": err.Error()})
	fmt.Println(string(line))
	os.Exit(1)
}

// run calls op(i) for i in [0, ops) from `clients` goroutines and times each call.
func run(ops, clients int, op func(i int) error) (result, error) {
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	lat := make([]int64, 0, ops)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < max(1, clients); c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= ops {
					return
				}
				t := time.Now()
				err := op(i)
				d := time.Since(t).Microseconds()
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, d)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return result{N: len(lat), WallS: time.Since(start).Seconds(), LatenciesUs: lat}, firstErr
}

func main() {
	peer := flag.String("peer", "", "etcd or http")
	endpoints := flag.String("endpoints", "", "etcd: comma-separated client URLs")
	url := flag.String("url", "", "http: the URL to POST to")
	ops := flag.Int("ops", 100, "timed operations")
	clients := flag.Int("clients", 1, "concurrent callers")
	warmup := flag.Int("warmup", 10, "untimed operations first")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline of one call")
	flag.Parse()

	var op func(i int) error
	switch *peer {
	case "etcd":
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   strings.Split(*endpoints, ","),
			DialTimeout: 10 * time.Second,
		})
		if err != nil {
			fail(err)
		}
		defer cli.Close()
		// About the size of a registry record: a 400-byte value under a per-session key.
		value := strings.Repeat("x", 400)
		prefix := fmt.Sprintf("/lineage-bench/%d/", time.Now().UnixNano())
		op = func(i int) error {
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			defer cancel()
			_, err := cli.Put(ctx, fmt.Sprintf("%s%d", prefix, i), value)
			return err
		}
	case "http":
		transport := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
		client := &http.Client{Transport: transport, Timeout: *timeout}
		op = func(i int) error {
			resp, err := client.Post(*url, "application/json", bytes.NewReader([]byte(`"go"`)))
			if err != nil {
				return err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if resp.StatusCode != 200 {
				return fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)
			}
			return nil
		}
	default:
		fail(fmt.Errorf("unknown --peer %q (etcd or http)", *peer))
	}
	if _, err := run(*warmup, min(*warmup, *clients), op); err != nil {
		fail(fmt.Errorf("warm-up: %w", err))
	}
	res, err := run(*ops, *clients, op)
	if err != nil {
		fail(err)
	}
	line, _ := json.Marshal(res)
	fmt.Println(string(line))
}
