// Package kubetest runs a real kube-apiserver and etcd for tests of the
// kube link and of the manifests in examples/kubernetes. The binaries are
// built once per machine by build.sh (from the Go module proxy) into a
// cache directory; without them the tests skip, except when CI=true or
// ENID_REQUIRE_KUBE=1, where they fail. Its waits are on the wall clock:
// they wait for real processes.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// AgentUser is the identity of the agent's token: the user name of the
// service account examples/kubernetes binds its ClusterRole to, so the
// agent has exactly the RBAC the manifests grant.
const AgentUser = "system:serviceaccount:enid-system:enid"

// BinDir returns the directory holding kube-apiserver and etcd: the first
// of $ENID_KUBE_BIN, $XDG_CACHE_HOME/enid-kube (or ~/.cache/enid-kube) and
// /var/cache/enid-kube that has both ("" when none has).
func BinDir() string {
	var dirs []string
	if d := os.Getenv("ENID_KUBE_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		dirs = append(dirs, filepath.Join(d, "enid-kube"))
	} else if h, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(h, ".cache", "enid-kube"))
	}
	dirs = append(dirs, "/var/cache/enid-kube")
	for _, d := range dirs {
		if isExec(filepath.Join(d, "kube-apiserver")) && isExec(filepath.Join(d, "etcd")) {
			return d
		}
	}
	return ""
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// Required reports whether the API server tests must run (not skip).
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("ENID_REQUIRE_KUBE") == "1"
}

// Server is a kube-apiserver with its etcd, on 127.0.0.1, with two token
// identities: an admin (system:masters) and the agent (AgentUser).
type Server struct {
	t   testing.TB
	bin string
	dir string
	// URL is the API server's address; CAFile the CA of its serving cert.
	URL    string
	CAFile string
	// AdminToken and AgentToken authenticate the two identities.
	AdminToken, AgentToken string

	etcdPort, peerPort, apiPort int
	etcd, api                   *Process
}

// Process is a running program whose output goes to a log file (the
// real-cluster harness, testbed/cluster, runs its programs with it too).
type Process struct {
	cmd *exec.Cmd
	// Log is the file its output goes to.
	Log  string
	done chan struct{}
}

// Start starts etcd and kube-apiserver for t; they are stopped, and their
// files removed, when t ends. It skips t when the binaries are missing
// (fails when Required).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := BinDir()
	if bin == "" {
		msg := "kube-apiserver and etcd are not built: run kube/kubetest/build.sh (about 5 minutes, once per machine)"
		if Required() {
			t.Fatal(msg + "; they are required here (CI=true or ENID_REQUIRE_KUBE=1)")
		}
		t.Skip("skipped: " + msg)
	}
	dir := t.TempDir()
	s := &Server{t: t, bin: bin, dir: dir, AdminToken: token(), AgentToken: token()}
	s.etcdPort, s.peerPort, s.apiPort = freePort(t), freePort(t), freePort(t)
	s.URL = "https://127.0.0.1:" + strconv.Itoa(s.apiPort)
	s.CAFile = filepath.Join(dir, "certs", "apiserver.crt")
	tokens := fmt.Sprintf("%s,admin,uid-admin,\"system:masters\"\n%s,%s,uid-enid,\"system:serviceaccounts,system:serviceaccounts:enid-system\"\n",
		s.AdminToken, s.AgentToken, AgentUser)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stopAll)
	s.startEtcd()
	s.StartAPI()
	return s
}

func (s *Server) startEtcd() {
	s.t.Helper()
	peer := "http://127.0.0.1:" + strconv.Itoa(s.peerPort)
	client := "http://127.0.0.1:" + strconv.Itoa(s.etcdPort)
	s.etcd = s.run("etcd", filepath.Join(s.bin, "etcd"), "--name", "kubetest", "--data-dir", filepath.Join(s.dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "kubetest="+peer, "--unsafe-no-fsync")
	s.waitHTTP(client+"/health", nil, 30*time.Second)
}

// StartAPI starts kube-apiserver (again, after StopAPI) on the same port,
// with the same certificate and etcd, and waits until it is ready.
func (s *Server) StartAPI() {
	s.t.Helper()
	s.api = s.run("kube-apiserver", filepath.Join(s.bin, "kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:"+strconv.Itoa(s.etcdPort),
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(s.apiPort),
		"--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
		"--cert-dir", filepath.Join(s.dir, "certs"),
		"--token-auth-file", filepath.Join(s.dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		// No controller-manager makes the default service accounts.
		"--disable-admission-plugins", "ServiceAccount",
		"--allow-privileged=true",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(s.dir, "sa.key"),
		"--service-account-signing-key-file", filepath.Join(s.dir, "sa.key"),
		"--service-cluster-ip-range", "10.0.0.0/24")
	s.waitHTTP(s.URL+"/readyz", map[string]string{"Authorization": "Bearer " + s.AdminToken}, 90*time.Second)
}

// StopAPI stops kube-apiserver (etcd keeps running).
func (s *Server) StopAPI() {
	s.t.Helper()
	s.api.stop()
}

func (s *Server) stopAll() {
	if s.api != nil {
		s.api.stop()
	}
	if s.etcd != nil {
		s.etcd.stop()
	}
	if s.t.Failed() {
		for _, p := range []*Process{s.api, s.etcd} {
			if p != nil {
				s.t.Logf("%s (tail):\n%s", p.Log, Tail(p.Log, 30))
			}
		}
	}
}

func (s *Server) run(name, path string, args ...string) *Process {
	s.t.Helper()
	return StartProcess(s.t, s.dir, name, append([]string{path}, args...)...)
}

// StartProcess starts argv with its output in a log file of dir named
// after name; the process is killed if the test binary dies (Pdeathsig).
// Stop it with Stop.
func StartProcess(t testing.TB, dir, name string, argv ...string) *Process {
	t.Helper()
	log := filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Process{cmd: cmd, Log: log, done: make(chan struct{})}
	go func() {
		// Ends when the process exits; Stop makes sure it does.
		cmd.Wait() //nolint:errcheck // the exit status of a stopped server says nothing
		f.Close()
		close(p.done)
	}()
	return p
}

// Pid is the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process: SIGTERM, then SIGKILL after 10s.
func (p *Process) stop() { p.Stop(10 * time.Second) }

// Stop ends the process: SIGTERM, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited; done says
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill() //nolint:errcheck // as above
		<-p.done
	}
}

// waitHTTP polls url until it answers 200.
func (s *Server) waitHTTP(url string, hdr map[string]string, timeout time.Duration) {
	s.t.Helper()
	WaitHTTP(s.t, nil, url, hdr, timeout)
}

// WaitHTTP polls url with c (nil: a client that skips TLS verification,
// for a local test server) until it answers 200; it fails t after timeout.
func WaitHTTP(t testing.TB, c *http.Client, url string, hdr map[string]string, timeout time.Duration) {
	t.Helper()
	if c == nil {
		c = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // readiness probe of a local test server
	}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not ready after %s: %s", url, timeout, last)
}

// Kubeconfig writes a kubeconfig for token and returns its path.
func (s *Server) Kubeconfig(name, token string) string {
	s.t.Helper()
	p := filepath.Join(s.dir, name+".kubeconfig")
	if err := WriteKubeconfig(p, s.URL, s.CAFile, name, token); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// WriteKubeconfig writes a kubeconfig to path for a bearer token of user
// at server, trusting the CA in caFile.
func WriteKubeconfig(path, server, caFile, user, token string) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: kubetest
  context: {cluster: kubetest, user: %s}
current-context: kubetest
`, server, caFile, user, token, user)
	return os.WriteFile(path, []byte(cfg), 0o600)
}

// Client returns a clientset authenticated with token.
func (s *Server) Client(token string) kubernetes.Interface {
	s.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig("client-"+token[:8], token))
	if err != nil {
		s.t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	return cs
}

// Token returns a random bearer token.
func Token() string { return token() }

func token() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Tail returns the last n lines of a file (its error, if unreadable).
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
