// Command controlplane runs a real Kubernetes control plane in one process on
// 127.0.0.1: etcd (embedded), kube-apiserver and kube-controller-manager, all
// from k8s.io/kubernetes at the release in go.mod. It is the truth that
// leash's own sandbox is checked against.
//
// It makes a CA, serving and client certificates and the service-account
// signing key, starts etcd, then the API server (TLS, RBAC and Node
// authorization, the default admission plugins, webhooks included), waits
// for /readyz, then the controller manager (every default controller, each
// with its own service-account credentials). When the cluster is ready it
// writes an admin kubeconfig and prints one line of JSON on stdout:
//
//	{"server":"https://127.0.0.1:PORT","kubeconfig":"...","etcd":"http://127.0.0.1:PORT","dir":"..."}
//
// SIGTERM or SIGINT (or, with --exit-on-stdin-close, the end of stdin: the
// parent died) stops the three and removes the data directory.
//
// `controlplane compact --etcd URL` compacts etcd's history up to its
// current revision as kube-apiserver's periodic compaction does (and tells
// the API server so the same way): continue tokens and watches older than
// that expire.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	errorsutil "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	cmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "compact" {
		if err := compact(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane compact: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: %v\n", err)
		os.Exit(1)
	}
}

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// ready is the line printed on stdout when the cluster is ready.
type ready struct {
	Server     string `json:"server"`
	Kubeconfig string `json:"kubeconfig"`
	Etcd       string `json:"etcd"`
	Dir        string `json:"dir"`
}

func run(args []string) error {
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	dir := fs.String("dir", "", "data directory (etcd, certificates, kubeconfigs); default a new temporary one. Removed at exit.")
	kubeconfig := fs.String("kubeconfig", "", "where to write the admin kubeconfig (default DIR/admin.kubeconfig); removed at exit")
	port := fs.Int("port", 0, "the API server's port on 127.0.0.1 (0: a free one)")
	logFile := fs.String("log", "", "write the components' logs to this file instead of stderr")
	verbosity := fs.Int("v", 0, "log verbosity of the API server and controller manager")
	stdinClose := fs.Bool("exit-on-stdin-close", false, "stop when stdin reaches its end (the parent process is gone)")
	var apiserverArgs, cmArgs repeated
	fs.Var(&apiserverArgs, "apiserver-arg", "an extra kube-apiserver flag, as --name=value (repeatable)")
	fs.Var(&cmArgs, "controller-manager-arg", "an extra kube-controller-manager flag, as --name=value (repeatable)")
	readyTimeout := fs.Duration("ready-timeout", 3*time.Minute, "how long the start may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}

	if *dir == "" {
		d, err := os.MkdirTemp("", "leash-controlplane-")
		if err != nil {
			return err
		}
		*dir = d
	} else if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	if *kubeconfig == "" {
		*kubeconfig = filepath.Join(*dir, "admin.kubeconfig")
	}
	// Whatever happens from here on, the data goes with the process.
	defer func() {
		os.RemoveAll(*dir)
		os.Remove(*kubeconfig)
	}()

	var logs io.Writer = os.Stderr
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("--log: %w", err)
		}
		defer f.Close()
		logs = f
	}
	klog.SetOutput(logs)
	klog.LogToStderr(false)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *stdinClose {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}

	pki, err := makePKI(filepath.Join(*dir, "pki"))
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}

	// etcd, on free loopback ports.
	etcdPorts, err := freePorts(2)
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPorts[0])
	e, err := startEtcd(filepath.Join(*dir, "etcd"), etcdURL, fmt.Sprintf("http://127.0.0.1:%d", etcdPorts[1]), logs)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-time.After(*readyTimeout):
		return errors.New("etcd: not ready in time")
	case <-ctx.Done():
		return nil
	}

	if *port == 0 {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		*port = ports[0]
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", *port)
	adminCfg := filepath.Join(*dir, "admin.kubeconfig")
	if err := writeKubeconfig(adminCfg, server, pki.caCert, pki.adminCert, pki.adminKey, "admin"); err != nil {
		return err
	}
	cmCfg := filepath.Join(*dir, "controller-manager.kubeconfig")
	if err := writeKubeconfig(cmCfg, server, pki.caCert, pki.cmCert, pki.cmKey, "system:kube-controller-manager"); err != nil {
		return err
	}

	// The components run until ctx ends; each reports its end here.
	compCtx, cancelComponents := context.WithCancel(context.Background())
	defer cancelComponents()
	ended := make(chan componentEnd, 2)

	apiArgs := append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(*port),
		"--cert-dir=" + filepath.Join(*dir, "apiserver"),
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--client-ca-file=" + pki.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.saPub,
		"--service-account-signing-key-file=" + pki.saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		// As kubeadm and kind set it: privileged pods are for policy to judge.
		"--allow-privileged=true",
		// The endpoint reconciler would publish 127.0.0.1 as the
		// kubernetes Service's endpoint, which endpoint validation refuses.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--v=" + strconv.Itoa(*verbosity),
	}, apiserverArgs...)
	go func() {
		ended <- componentEnd{"kube-apiserver", runAPIServer(compCtx, apiArgs)}
	}()
	if err := waitReady(ctx, adminCfg, *readyTimeout, ended); err != nil {
		cancelComponents()
		return err
	}

	cmArgsAll := append([]string{
		"--kubeconfig=" + cmCfg,
		"--authentication-kubeconfig=" + cmCfg,
		"--authorization-kubeconfig=" + cmCfg,
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + pki.saKey,
		"--root-ca-file=" + pki.caCert,
		"--cluster-signing-cert-file=" + pki.caCert,
		"--cluster-signing-key-file=" + pki.caKey,
		"--controllers=*",
		"--flex-volume-plugin-dir=" + filepath.Join(*dir, "volume-plugins"),
		"--v=" + strconv.Itoa(*verbosity),
	}, cmArgs...)
	go func() {
		ended <- componentEnd{"kube-controller-manager", runControllerManager(compCtx, cmArgsAll)}
	}()

	if *kubeconfig != adminCfg {
		data, err := os.ReadFile(adminCfg)
		if err != nil {
			return err
		}
		if err := os.WriteFile(*kubeconfig, data, 0o600); err != nil {
			return fmt.Errorf("--kubeconfig: %w", err)
		}
	}
	line, _ := json.Marshal(ready{Server: server, Kubeconfig: *kubeconfig, Etcd: etcdURL, Dir: *dir})
	fmt.Println(string(line))
	fmt.Fprintf(os.Stderr, "controlplane: ready at %s (kubeconfig %s)\n", server, *kubeconfig)

	var failure error
	select {
	case <-ctx.Done():
	case end := <-ended:
		failure = fmt.Errorf("%s stopped: %v", end.name, end.err)
	}
	fmt.Fprintln(os.Stderr, "controlplane: stopping")
	cancelComponents()
	// Each component gets a bounded time to stop; etcd closes after them.
	deadline := time.After(30 * time.Second)
	for remaining := 2; remaining > 0; remaining-- {
		if failure != nil && remaining == 2 {
			remaining-- // the one that failed has already ended
		}
		select {
		case <-ended:
		case <-deadline:
			fmt.Fprintln(os.Stderr, "controlplane: a component did not stop within 30 s")
			remaining = 0
		}
	}
	return failure
}

type componentEnd struct {
	name string
	err  error
}

// runAPIServer is what kube-apiserver's command does, with this process's
// context instead of the command's own signal handler.
func runAPIServer(ctx context.Context, args []string) error {
	s := apiserveroptions.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	completed, err := s.Complete(ctx)
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return errorsutil.NewAggregate(errs)
	}
	return apiserver.Run(ctx, completed)
}

// runControllerManager is what kube-controller-manager's command does, with
// this process's context.
func runControllerManager(ctx context.Context, args []string) error {
	s, err := cmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return err
	}
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	named := s.Flags(controllermanager.KnownControllers(), controllermanager.ControllersDisabledByDefault(), controllermanager.ControllerAliases())
	s.ParsedFlags = &named
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	c, err := s.Config(ctx, controllermanager.KnownControllers(), controllermanager.ControllersDisabledByDefault(), controllermanager.ControllerAliases())
	if err != nil {
		return err
	}
	return controllermanager.Run(ctx, c.Complete())
}

func startEtcd(dir, clientURL, peerURL string, logs io.Writer) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "leash-testenv"
	cfg.Dir = dir
	cu, err := parseURLs(clientURL)
	if err != nil {
		return nil, err
	}
	pu, err := parseURLs(peerURL)
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = cu, cu
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = pu, pu
	cfg.InitialCluster = cfg.Name + "=" + peerURL
	cfg.LogLevel = zapcore.WarnLevel.String()
	cfg.LogOutputs = []string{"stderr"}
	if f, ok := logs.(*os.File); ok && f != os.Stderr {
		cfg.LogOutputs = []string{f.Name()}
	}
	// No fsync per write: the data is thrown away at exit anyway, and tests
	// write tens of thousands of objects.
	cfg.UnsafeNoFsync = true
	return embed.StartEtcd(cfg)
}

// waitReady polls the API server's /readyz with the admin credentials.
func waitReady(ctx context.Context, kubeconfig string, timeout time.Duration, ended <-chan componentEnd) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: transport, Timeout: 5 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(cfg.Host + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready within %s (last: %v)", timeout, err)
		}
		select {
		case end := <-ended:
			return fmt.Errorf("%s stopped before it was ready: %v", end.name, end.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func writeKubeconfig(path, server, ca, cert, key, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: cert, ClientKey: key}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "testenv"
	// Paths inlined so the file works wherever it is copied.
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func compact(args []string) error {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	endpoint := fs.String("etcd", "", "etcd's client URL (the ready line's \"etcd\")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" {
		return errors.New("--etcd is required")
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// What kube-apiserver's own compactor does (k8s.io/apiserver's
	// etcd3.Compact): record the revision in compact_rev_key, which every API
	// server watches, then compact. The API servers' watch caches drop their
	// snapshots older than it within their poll period (15 s), after which a
	// continue token older than it gets 410 Expired.
	put, err := client.Put(ctx, "compact_rev_key", "0")
	if err != nil {
		return err
	}
	rev := put.Header.Revision
	if _, err := client.Put(ctx, "compact_rev_key", strconv.FormatInt(rev, 10)); err != nil {
		return err
	}
	if _, err := client.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return err
	}
	fmt.Println(rev)
	return nil
}

func parseURLs(s string) ([]url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	return []url.URL{*u}, nil
}
