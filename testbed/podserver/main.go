// Command podserver is the workload of the real-cluster tests
// (testbed/cluster): a static binary on an empty base, in two images.
//
//	podserver serve [ADDR]   answer HTTP on ADDR (default :8080) with the
//	                         pod's name and the address the request came
//	                         from; GET /fetch?url=U fetches U from inside
//	                         the pod (pod-to-pod traffic through the
//	                         datapath) and answers with what it got
//	podserver pause          the sandbox ("pause") container: sleep until
//	                         signalled
//
// It exists because the cluster runs offline: no image can be pulled.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: podserver serve [ADDR] | podserver pause")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	switch os.Args[1] {
	case "pause":
		<-ctx.Done()
	case "serve":
		addr := ":8080"
		if len(os.Args) > 2 {
			addr = os.Args[2]
		}
		if err := serve(ctx, addr); err != nil {
			fmt.Fprintln(os.Stderr, "podserver:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "podserver: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

func serve(ctx context.Context, addr string) error {
	name, _ := os.Hostname() // the pod's name; "" says it could not be read
	client := &http.Client{Timeout: 5 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s\n", name, r.RemoteAddr)
	})
	mux.HandleFunc("/fetch", func(w http.ResponseWriter, r *http.Request) {
		resp, err := client.Get(r.URL.Query().Get("url"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Write(b) //nolint:errcheck // the client went away
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close() //nolint:errcheck // shutting down
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}
