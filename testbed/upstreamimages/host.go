package upstreamimages

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/enidnet/enid/internal/ociimage"
)

// hostTools are the paths, on this machine, of the Debian programs the
// images carry.
type hostTools struct {
	busybox, dash, curl, nc, wget, ss, ip, bash string
	dig, nslookup, host, getent                 string
	nginx                                       string
	conntrack, xtablesNft, xtablesLegacy        string
	// xtablesModules are the iptables extensions the xtables programs
	// load at run time (dlopen: ldd does not list them).
	xtablesModules []string
}

// xtablesDir is where Debian's xtables programs look for their extensions
// (on amd64, which is what this machine and CI build for).
const xtablesDir = "/usr/lib/x86_64-linux-gnu/xtables"

// ciNginx is where .ci/run unpacks Debian's nginx package (dpkg-deb -x)
// rather than installing it: installed, its service would start on the
// host's port 80.
const ciNginx = "/usr/local/lib/enid-ci/nginx/usr/sbin/nginx"

// findHostTools finds each tool in the first of its usual places (Debian
// with or without a merged /usr) and says which package to install for
// those it cannot find.
func findHostTools() (hostTools, error) {
	var missing []string
	find := func(pkg string, candidates ...string) string {
		for _, c := range candidates {
			if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
				return c
			}
		}
		missing = append(missing, fmt.Sprintf("%s (apt-get install %s)", candidates[0], pkg))
		return ""
	}
	h := hostTools{
		busybox:       find("busybox-static", "/usr/bin/busybox", "/bin/busybox"),
		dash:          find("dash", "/usr/bin/dash", "/bin/dash"),
		curl:          find("curl", "/usr/bin/curl", "/bin/curl"),
		nc:            find("netcat-openbsd", "/usr/bin/nc.openbsd", "/bin/nc.openbsd"),
		wget:          find("wget", "/usr/bin/wget", "/bin/wget"),
		ss:            find("iproute2", "/usr/bin/ss", "/bin/ss", "/usr/sbin/ss", "/sbin/ss"),
		ip:            find("iproute2", "/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"),
		bash:          find("bash", "/usr/bin/bash", "/bin/bash"),
		dig:           find("bind9-dnsutils", "/usr/bin/dig", "/bin/dig"),
		nslookup:      find("bind9-dnsutils", "/usr/bin/nslookup", "/bin/nslookup"),
		host:          find("bind9-dnsutils", "/usr/bin/host", "/bin/host"),
		getent:        find("libc-bin", "/usr/bin/getent", "/bin/getent"),
		conntrack:     find("conntrack", "/usr/sbin/conntrack", "/sbin/conntrack"),
		xtablesNft:    find("iptables", "/usr/sbin/xtables-nft-multi", "/sbin/xtables-nft-multi"),
		xtablesLegacy: find("iptables", "/usr/sbin/xtables-legacy-multi", "/sbin/xtables-legacy-multi"),
		nginx:         find("nginx, or unpack it: apt-get download nginx && dpkg-deb -x nginx_*.deb /usr/local/lib/enid-ci/nginx", "/usr/sbin/nginx", ciNginx),
	}
	// Glob fails only on a malformed pattern, and this one is constant.
	if mods, _ := filepath.Glob(filepath.Join(xtablesDir, "*.so")); len(mods) > 0 {
		h.xtablesModules = mods
	} else {
		missing = append(missing, xtablesDir+"/*.so (apt-get install iptables)")
	}
	if len(missing) > 0 {
		return h, fmt.Errorf("the upstream test images need: %s", strings.Join(missing, ", "))
	}
	if interp, err := interpreter(h.busybox); err != nil {
		return h, err
	} else if interp != "" {
		// A dynamic busybox (Debian's "busybox" package) would need its
		// libraries beside every applet; the static one needs nothing.
		return h, fmt.Errorf("%s is dynamically linked (%s): install busybox-static", h.busybox, interp)
	}
	return h, nil
}

// interpreter returns the dynamic loader an ELF program names ("" for a
// static program).
func interpreter(file string) (string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", fmt.Errorf("read %s: %w", file, err)
			}
			return string(bytes.TrimRight(b, "\x00")), nil
		}
	}
	return "", nil
}

// busyboxFiles returns the static busybox at dir/busybox and a symbolic
// link to it in dir for each applet it lists, but those named in skip.
func busyboxFiles(ctx context.Context, busybox, dir string, skip map[string]bool) ([]ociimage.File, error) {
	data, err := os.ReadFile(busybox)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", busybox, err)
	}
	files := []ociimage.File{{Path: path.Join(dir, "busybox"), Mode: 0o755, Data: data}}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || skip[applet] || strings.Contains(applet, "/") {
			continue
		}
		files = append(files, ociimage.File{Path: path.Join(dir, applet), Link: "busybox"})
	}
	return files, nil
}

// placed is a host program and where it goes in an image.
type placed struct {
	host, image string
}

// dynamicFiles returns the programs at their image paths and, once each,
// the shared libraries and the loader they need, at the paths the host's
// loader finds them at (ldd), which are the paths it searches without a
// cache in the image too.
func dynamicFiles(ctx context.Context, programs []placed) ([]ociimage.File, error) {
	var files []ociimage.File
	libs := map[string]bool{}
	for _, p := range programs {
		data, err := os.ReadFile(p.host)
		if err != nil {
			return nil, err
		}
		files = append(files, ociimage.File{Path: p.image, Mode: 0o755, Data: data})
		needed, err := ldd(ctx, p.host)
		if err != nil {
			return nil, err
		}
		for _, l := range needed {
			libs[l] = true
		}
	}
	for _, l := range slices.Sorted(maps.Keys(libs)) {
		data, err := os.ReadFile(l) // through the host's links: the image has the files
		if err != nil {
			return nil, err
		}
		files = append(files, ociimage.File{Path: l, Mode: 0o755, Data: data})
	}
	return files, nil
}

// ldd returns the absolute paths of the shared libraries and the loader
// that program loads, as the host's ldd resolves them.
func ldd(ctx context.Context, program string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", program).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", program, err)
	}
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)",
		// "/lib64/ld-linux-x86-64.so.2 (0x...)", "linux-vdso.so.1 (0x...)"
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			paths = append(paths, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			paths = append(paths, f[0])
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return nil, fmt.Errorf("ldd %s: %s", program, strings.TrimSpace(sc.Text()))
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("ldd %s: no libraries (a static program needs no copy of them: %q)", program, out)
	}
	return paths, nil
}

// compilePause compiles the kubernetes module's pause.c as upstream's
// Makefile does (gcc -Os -Wall -Werror -static) and returns the program.
func compilePause(ctx context.Context, src, dir string) ([]byte, error) {
	out := filepath.Join(dir, ".pause.tmp")
	defer os.Remove(out) // the program is read into the image below; gone if gcc failed
	cmd := exec.CommandContext(ctx, "gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION="+pauseVersion,
		"-o", out, filepath.Join(src, "build/pause/linux/pause.c"))
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("compile pause.c (needs gcc and libc6-dev): %w\n%s", err, b)
	}
	return os.ReadFile(out)
}

// kubernetesSource returns the directory of k8s.io/kubernetes at
// KubernetesVersion in the Go module cache, downloading it if need be
// (build.sh has, when it built agnhost). It runs in dir, outside any
// module.
func kubernetesSource(ctx context.Context, dir string) (string, error) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.CommandContext(ctx, goTool, "mod", "download", "-json", "k8s.io/kubernetes@"+KubernetesVersion)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GO111MODULE=on")
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr != nil || m.Dir == "" {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go mod download k8s.io/kubernetes@%s: %s %s: %w", KubernetesVersion, m.Error, ee.Stderr, err)
		}
		return "", fmt.Errorf("go mod download k8s.io/kubernetes@%s: %v %v %s", KubernetesVersion, err, jerr, m.Error)
	}
	return m.Dir, nil
}
