// Command crmanager is the workload of the lease hand-over tests and
// benchmark: a controller-runtime manager configured the way most operators
// ship one.  Leader election is on with controller-runtime's defaults (15 s
// lease, 10 s renew deadline, 2 s retry period) and LeaderElectionReleaseOnCancel
// off, so a manager that exits leaves its Lease held until it expires unless
// something else (the supervisor's lease_release) hands it over.
//
// It runs one real controller (ConfigMaps in its namespace, through the
// manager's cache) so leading means what it means for an operator: the
// controller's workers only start once the Lease is won.
//
// Standard output gets one JSON line per lifecycle event, with the wall clock
// in nanoseconds, for the tests and the benchmark to wait on:
//
//	{"event":"started","identity":"...","unix_nano":...}
//	{"event":"leading","identity":"...","unix_nano":...}
//	{"event":"reconciled","name":"...","unix_nano":...}
//	{"event":"stopping","identity":"...","unix_nano":...}   (the signal arrived)
//	{"event":"stopped","identity":"...","unix_nano":...}    (about to exit)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

var (
	output sync.Mutex
	report *os.File // --report: the same lines, for a process whose stdout is not ours to read
)

func emit(fields map[string]any) {
	fields["unix_nano"] = time.Now().UnixNano()
	line, err := json.Marshal(fields)
	if err != nil {
		panic(err)
	}
	output.Lock()
	defer output.Unlock()
	fmt.Println(string(line))
	if report != nil {
		_, _ = report.Write(append(line, '\n'))
	}
}

type configMapReconciler struct{ client client.Client }

func (r *configMapReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var cm corev1.ConfigMap
	if err := r.client.Get(ctx, req.NamespacedName, &cm); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	emit(map[string]any{"event": "reconciled", "name": req.Name})
	return reconcile.Result{}, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "crmanager:", err)
	os.Exit(1)
}

// defaultIdentity is controller-runtime's own holder identity,
// <hostname>_<uuid>; in a pod the hostname is the pod's name.  Tests run
// both replicas on one host, so POD_NAME (the downward API's name) stands in
// for the hostname when it is set.
func defaultIdentity() string {
	name := os.Getenv("POD_NAME")
	if name == "" {
		host, err := os.Hostname()
		if err != nil {
			fail(err)
		}
		name = host
	}
	return name + "_" + string(uuid.NewUUID())
}

// leaseLock builds the Lease lock exactly as controller-runtime's
// NewResourceLock does (user agent, per-request timeout of half the renew
// deadline), except that the identity is the one chosen above, so it can be
// printed and matched by the tests.
func leaseLock(cfg *rest.Config, namespace, name, id string, renewDeadline time.Duration) (resourcelock.Interface, error) {
	cfg = rest.AddUserAgent(cfg, "leader-election")
	cfg.Timeout = max(renewDeadline/2, time.Second)
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	coordination, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return resourcelock.New(resourcelock.LeasesResourceLock, namespace, name, core, coordination,
		resourcelock.ResourceLockConfig{Identity: id})
}

func main() {
	namespace := flag.String("namespace", os.Getenv("POD_NAMESPACE"), "namespace of the Lease and of the ConfigMaps it watches")
	leaseName := flag.String("lease", "crmanager-leader", "name of the leader Lease")
	identity := flag.String("identity", "", "holder identity (default: controller-runtime's <hostname>_<uuid>)")
	releaseOnCancel := flag.Bool("release-on-cancel", false, "LeaderElectionReleaseOnCancel: release the Lease in-process on shutdown")
	leaseDuration := flag.Duration("lease-duration", 15*time.Second, "LeaseDuration (controller-runtime's default)")
	renewDeadline := flag.Duration("renew-deadline", 10*time.Second, "RenewDeadline (controller-runtime's default)")
	retryPeriod := flag.Duration("retry-period", 2*time.Second, "RetryPeriod (controller-runtime's default)")
	reportPath := flag.String("report", "", "also append the JSON lines to this file")
	// The flags a kubebuilder-made controller has, so that the manifests in
	// examples/kubernetes run this manager as they are.
	leaderElect := flag.Bool("leader-elect", true, "take part in leader election")
	electionID := flag.String("leader-election-id", "", "name of the leader Lease (same as --lease)")
	probeAddr := flag.String("health-probe-bind-address", "0", "address of /healthz and /readyz (\"0\": none)")
	metricsAddr := flag.String("metrics-bind-address", "0", "address of /metrics (\"0\": none)")
	flag.Parse()
	if *electionID != "" {
		*leaseName = *electionID
	}
	if *reportPath != "" {
		var err error
		report, err = os.OpenFile(*reportPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fail(err)
		}
	}
	if *namespace == "" {
		fmt.Fprintln(os.Stderr, "crmanager: --namespace (or POD_NAMESPACE) is required")
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		fail(err)
	}
	id := *identity
	if id == "" {
		id = defaultIdentity()
	}
	lock, err := leaseLock(cfg, *namespace, *leaseName, id, *renewDeadline)
	if err != nil {
		fail(err)
	}
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		LeaderElection:                      *leaderElect,
		LeaderElectionID:                    *leaseName,
		LeaderElectionNamespace:             *namespace,
		LeaderElectionResourceLockInterface: lock,
		LeaderElectionReleaseOnCancel:       *releaseOnCancel,
		LeaseDuration:                       leaseDuration,
		RenewDeadline:                       renewDeadline,
		RetryPeriod:                         retryPeriod,
		Cache:                               cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
		Metrics:                             metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:              *probeAddr,
	})
	if err != nil {
		fail(err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		fail(err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		fail(err)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		Complete(&configMapReconciler{client: mgr.GetClient()})
	if err != nil {
		fail(err)
	}

	ctx := ctrl.SetupSignalHandler()
	go func() {
		select {
		case <-mgr.Elected():
			emit(map[string]any{"event": "leading", "identity": id})
		case <-ctx.Done():
		}
	}()
	signalled := make(chan struct{})
	go func() {
		<-ctx.Done() // SIGTERM or SIGINT arrived
		emit(map[string]any{"event": "stopping", "identity": id})
		close(signalled)
	}()
	emit(map[string]any{"event": "started", "identity": id})
	if err := mgr.Start(ctx); err != nil {
		fail(err)
	}
	<-signalled // Start returns once the context is done: "stopping" comes first
	emit(map[string]any{"event": "stopped", "identity": id})
}
