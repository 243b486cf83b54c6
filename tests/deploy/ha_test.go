package deploy

import (
	"cmp"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpumeter/gpumeter/internal/election"
)

// kubeHAWant is what a set of manifests must say about the replicated
// server (issue 35): the plain manifests' defaults, or what the chart's
// values asked for.
type kubeHAWant struct {
	replicas      int32
	election      bool // the replicas elect a leader through a Lease
	failurePolicy admissionregistrationv1.FailurePolicyType
	collector     bool   // the collector DaemonSet is there
	dsnSecret     string // the Secret of GPUMETER_CLICKHOUSE (key dsn)
	tlsSecret     string // serve's certificate and key
	clientCA      string // the Secret of --tls-client-ca; "" for none
	forwardCert   string // the Secret of election.forward.cert_file and key_file; "" for none
	probeMetrics  bool   // the probes ask the metrics port (HTTP), not the API port (HTTPS)
}

// kubeServe is the Deployment running gpumeter serve and its container.
func kubeServe(m kubeManifests) (kubeWorkload, *corev1.Container, bool) {
	for _, w := range m.workloads {
		for i, c := range w.template.Spec.Containers {
			if isGpumeterImage(c.Image) && slices.Contains(c.Args, "serve") && strings.HasPrefix(w.where, "Deployment/") {
				return w, &w.template.Spec.Containers[i], true
			}
		}
	}
	return kubeWorkload{}, nil, false
}

// selects reports whether a label selector picks the pods of w.
func selects(sel *metav1.LabelSelector, w kubeWorkload) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(w.template.Labels))
}

// checkKubeHA asserts the replicated server's deployment: replicas, the
// disruption budget, the spread over nodes, the NetworkPolicy's ports, the
// Lease RBAC, the probes, TLS, the webhook's failurePolicy and service, the
// DSN from its Secret, and the collector being there or not.
func checkKubeHA(t testing.TB, m kubeManifests, want kubeHAWant) {
	t.Helper()
	w, c, ok := kubeServe(m)
	if !ok {
		t.Errorf("no Deployment runs gpumeter serve")
		return
	}
	if got := deref(w.replicas); got != want.replicas {
		t.Errorf("%s: replicas %d; want %d", w.where, got, want.replicas)
	}
	checkKubeSpread(t, w)
	checkKubePDB(t, m, w)
	checkKubeNetworkPolicy(t, m, w, c)
	checkKubeElection(t, m, w, c, want)

	// The Lease: exactly get, create and update on leases, in a Role of
	// the server's namespace; with the admission webhook, get on the DRA
	// claims and templates Pods name, in a ClusterRole of that alone
	// (tenants' namespaces vary); and the token to use them.
	spec := w.template.Spec
	wantLease := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}}
	wantClaims := []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}, Verbs: []string{"get"}}}
	wantGrants := wantLease
	if len(m.webhooks) > 0 {
		wantGrants = append(append([]rbacv1.PolicyRule(nil), wantLease...), wantClaims...)
	}
	granted := kubeGrants(m, w.namespace, spec.ServiceAccountName)
	slices.SortFunc(granted, func(a, b rbacv1.PolicyRule) int {
		return cmp.Compare(strings.Join(a.APIGroups, ","), strings.Join(b.APIGroups, ","))
	})
	if !kubeRulesEqual(granted, wantGrants) {
		t.Errorf("%s: account %s is granted %+v; want %+v", w.where, spec.ServiceAccountName, granted, wantGrants)
	}
	for _, b := range m.bindings {
		for _, s := range b.subjects {
			if s.Name == spec.ServiceAccountName && s.Namespace == w.namespace && !strings.HasPrefix(b.roleKey, "Role/"+w.namespace+"/") &&
				!(strings.HasPrefix(b.roleKey, "ClusterRole/") && kubeRulesEqual(m.roles[b.roleKey], wantClaims)) {
				t.Errorf("%s: binds %s to the server: want a Role of namespace %s, or a ClusterRole of get on resourceclaims and resourceclaimtemplates only", b.name, b.roleKey, w.namespace)
			}
		}
	}
	if a := spec.AutomountServiceAccountToken; a == nil || !*a {
		t.Errorf("%s: the leader election needs the service-account token: automountServiceAccountToken: true", w.where)
	}

	// Probes and TLS.
	where := w.where + " container " + c.Name
	listen, _ := flagValue(c.Args, "listen")
	metrics, _ := flagValue(c.Args, "metrics-listen")
	checkKubeHealthProbes(t, where, *c, listen, metrics)
	wantScheme, wantPort := corev1.URISchemeHTTPS, "https"
	if want.probeMetrics {
		wantScheme, wantPort = corev1.URISchemeHTTP, "metrics"
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p != nil && p.HTTPGet != nil && (p.HTTPGet.Scheme != wantScheme || kubeContainerPort(*c, p.HTTPGet.Port) != kubeContainerPort(*c, intstr.FromString(wantPort))) {
			t.Errorf("%s: probe of %s on port %s over %q; want %s over %s", where, p.HTTPGet.Path, p.HTTPGet.Port.String(), p.HTTPGet.Scheme, wantPort, wantScheme)
		}
	}
	for _, flag := range []string{"tls-cert", "tls-key"} {
		p, _ := flagValue(c.Args, flag)
		if got := kubeSecretFile(w, *c, p); got != want.tlsSecret {
			t.Errorf("%s: --%s %q is from Secret %q; want %q", where, flag, p, got, want.tlsSecret)
		}
	}
	ca, hasCA := flagValue(c.Args, "tls-client-ca")
	switch got := kubeSecretFile(w, *c, ca); {
	case want.clientCA == "" && hasCA:
		t.Errorf("%s: --tls-client-ca %q, which was not asked for", where, ca)
	case want.clientCA != "" && got != want.clientCA:
		t.Errorf("%s: --tls-client-ca %q is from Secret %q; want %q", where, ca, got, want.clientCA)
	}

	checkKubeHAWebhook(t, m, w, c, want.failurePolicy)

	// The DSN, password and all, only from the Secret.
	var collector bool
	for _, o := range m.workloads {
		for _, oc := range o.template.Spec.Containers {
			if !isGpumeterImage(oc.Image) {
				continue
			}
			collector = collector || slices.Contains(oc.Args, "collect")
			var from *corev1.SecretKeySelector
			for _, e := range oc.Env {
				if e.Name == "GPUMETER_CLICKHOUSE" && e.Value == "" && e.ValueFrom != nil {
					from = e.ValueFrom.SecretKeyRef
				}
			}
			if from == nil || from.Name != want.dsnSecret || from.Key != "dsn" {
				t.Errorf("%s container %s: GPUMETER_CLICKHOUSE from %+v; want Secret %s key dsn", o.where, oc.Name, from, want.dsnSecret)
			}
		}
	}
	if collector != want.collector {
		t.Errorf("collector DaemonSet there: %v; want %v", collector, want.collector)
	}
}

// checkKubeElection: with several replicas the config file elects a
// leader through a Lease in the server's namespace; each pod's identity
// is its IP (the downward API's status.podIP) and its API port, where the
// others forward admissions; they check the leader's certificate for the
// name of a Service in front of the replicas' API port (the name the
// certificate is issued for, not a pod IP) against a CA from the TLS
// Secret. A single replica without an election is fine; several without
// one admit each on their own.
func checkKubeElection(t testing.TB, m kubeManifests, w kubeWorkload, c *corev1.Container, want kubeHAWant) {
	t.Helper()
	where := w.where + " container " + c.Name
	var cfg struct {
		Election election.Config `yaml:"election"`
	}
	for _, cm := range m.configMaps {
		if cm.Namespace == w.namespace && cm.Data["gpumeter.yaml"] != "" {
			if err := yaml.Unmarshal([]byte(cm.Data["gpumeter.yaml"]), &cfg); err != nil {
				t.Errorf("ConfigMap %s: gpumeter.yaml: %v", cm.Name, err)
			}
		}
	}
	e := cfg.Election
	if !want.election {
		if e.Backend != election.BackendNone {
			t.Errorf("%s: election backend %q, which was not asked for", where, e.Backend)
		}
		return
	}
	if e.Backend != election.BackendKubernetes || e.Kubernetes.Namespace != w.namespace {
		t.Errorf("%s: election backend %q in namespace %q; want kubernetes, the Lease in %s", where, e.Backend, e.Kubernetes.Namespace, w.namespace)
	}
	// The identity: $(VAR):port, VAR the pod's IP, port the API's.
	api := kubeContainerPort(*c, intstr.FromString("https"))
	var identity string
	for _, env := range c.Env {
		if env.Name == "GPUMETER_ELECTION_IDENTITY" && env.ValueFrom == nil {
			identity = env.Value
		}
	}
	m2 := regexp.MustCompile(`^\$\(([A-Za-z_][A-Za-z0-9_]*)\):(\d+)$`).FindStringSubmatch(identity)
	podIP := false
	if m2 != nil {
		for _, env := range c.Env {
			podIP = podIP || (env.Name == m2[1] && env.ValueFrom != nil && env.ValueFrom.FieldRef != nil && env.ValueFrom.FieldRef.FieldPath == "status.podIP")
		}
	}
	if m2 == nil || !podIP || m2[2] != strconv.Itoa(int(api)) {
		t.Errorf("%s: GPUMETER_ELECTION_IDENTITY %q; want $(POD_IP):%d, POD_IP from status.podIP", where, identity, api)
	}
	e.Identity = "10.0.3.7:" + strconv.Itoa(int(api))
	if err := e.Validate(); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	var named bool
	for _, s := range m.services {
		if s.Namespace != w.namespace || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
			continue
		}
		for _, p := range s.Spec.Ports {
			if kubeServiceTarget(w, p) == c && p.TargetPort.String() == "https" &&
				(e.Forward.ServerName == s.Name+"."+s.Namespace+".svc" || e.Forward.ServerName == s.Name+"."+s.Namespace+".svc.cluster.local") {
				named = true
			}
		}
	}
	if !named {
		t.Errorf("%s: election.forward.server_name %q is no Service in front of the API port: followers reach the leader by pod IP and check its certificate for that name", where, e.Forward.ServerName)
	}
	if got := kubeSecretFile(w, *c, e.Forward.CAFile); got == "" || got != want.tlsSecret {
		t.Errorf("%s: election.forward.ca_file %q is from Secret %q; want a key of %s", where, e.Forward.CAFile, got, want.tlsSecret)
	}
	// The client certificate a follower presents to a leader that requires
	// one: both files from the Secret asked for, or neither.
	for _, f := range []struct{ key, path string }{{"cert_file", e.Forward.CertFile}, {"key_file", e.Forward.KeyFile}} {
		switch got := kubeSecretFile(w, *c, f.path); {
		case want.forwardCert == "" && f.path != "":
			t.Errorf("%s: election.forward.%s %q, which was not asked for", where, f.key, f.path)
		case want.forwardCert != "" && got != want.forwardCert:
			t.Errorf("%s: election.forward.%s %q is from Secret %q; want a key of %s", where, f.key, f.path, got, want.forwardCert)
		}
	}
}

// checkKubeSpread: no two replicas on one node while nodes allow it (a hard
// topology spread by host name, maxSkew 1), and preferably not (a soft
// anti-affinity), both selecting the server's own pods.
func checkKubeSpread(t testing.TB, w kubeWorkload) {
	t.Helper()
	var hard, soft bool
	for _, c := range w.template.Spec.TopologySpreadConstraints {
		if c.TopologyKey == corev1.LabelHostname && c.MaxSkew == 1 && c.WhenUnsatisfiable == corev1.DoNotSchedule && selects(c.LabelSelector, w) {
			hard = true
		}
	}
	if a := w.template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		for _, term := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			soft = soft || (term.PodAffinityTerm.TopologyKey == corev1.LabelHostname && selects(term.PodAffinityTerm.LabelSelector, w))
		}
	}
	if !hard || !soft {
		t.Errorf("%s: hard spread by host name %v, preferred anti-affinity by host name %v; want both", w.where, hard, soft)
	}
}

// checkKubePDB: one budget selects the replicas; it lets a drain take one
// and never leaves fewer than two of three.
func checkKubePDB(t testing.TB, m kubeManifests, w kubeWorkload) {
	t.Helper()
	replicas := int(deref(w.replicas))
	var found int
	for _, p := range m.pdbs {
		if p.Namespace != w.namespace || !selects(p.Spec.Selector, w) {
			continue
		}
		found++
		var allowed int
		switch {
		case p.Spec.MaxUnavailable != nil && p.Spec.MinAvailable == nil:
			v, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MaxUnavailable, replicas, true)
			if err != nil {
				t.Errorf("PodDisruptionBudget %s: maxUnavailable: %v", p.Name, err)
			}
			allowed = v
		case p.Spec.MinAvailable != nil && p.Spec.MaxUnavailable == nil:
			v, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MinAvailable, replicas, true)
			if err != nil {
				t.Errorf("PodDisruptionBudget %s: minAvailable: %v", p.Name, err)
			}
			allowed = replicas - v
		default:
			t.Errorf("PodDisruptionBudget %s: want one of minAvailable and maxUnavailable", p.Name)
		}
		if allowed < 1 || replicas-allowed < min(2, replicas-1) {
			t.Errorf("PodDisruptionBudget %s: lets %d of %d replicas go at once; want at least 1, leaving at least 2", p.Name, allowed, replicas)
		}
	}
	if found != 1 {
		t.Errorf("%s: %d PodDisruptionBudgets select its pods; want 1", w.where, found)
	}
}

// kubePolicyPort resolves a NetworkPolicy port against the server
// container: its number, or 0 for a name the container lacks.
func kubePolicyPort(c *corev1.Container, p networkingv1.NetworkPolicyPort) int32 {
	if p.Port == nil {
		return -1 // every port
	}
	if p.Port.Type == intstr.Int {
		return p.Port.IntVal
	}
	return kubeContainerPort(*c, *p.Port)
}

func kubePolicyAllows(c *corev1.Container, ports []networkingv1.NetworkPolicyPort, port int32, proto corev1.Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := kubePolicyPort(c, p)
		if (pp == port || pp == -1) && deref(p.Protocol) == proto {
			return true
		}
	}
	return false
}

// checkKubeNetworkPolicy: one policy selects the replicas, for ingress and
// egress. In: the API port from any address the API server may have (no
// pod selector alone can name it), /metrics from some pods only. Out: DNS
// over UDP and TCP, ClickHouse's port of the config's DSN, the Kubernetes
// API, and the other replicas' API port.
func checkKubeNetworkPolicy(t testing.TB, m kubeManifests, w kubeWorkload, c *corev1.Container) {
	t.Helper()
	var pols []*networkingv1.NetworkPolicy
	for _, p := range m.netpols {
		if p.Namespace == w.namespace && selects(&p.Spec.PodSelector, w) {
			pols = append(pols, p)
		}
	}
	if len(pols) != 1 {
		t.Errorf("%s: %d NetworkPolicies select its pods; want 1", w.where, len(pols))
		return
	}
	p := pols[0]
	where := "NetworkPolicy/" + p.Namespace + "/" + p.Name
	if !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Errorf("%s: policyTypes %v; want Ingress and Egress", where, p.Spec.PolicyTypes)
	}
	api := kubeContainerPort(*c, intstr.FromString("https"))
	metrics := kubeContainerPort(*c, intstr.FromString("metrics"))
	if api == 0 || metrics == 0 {
		t.Errorf("%s: the server's ports https %d and metrics %d", where, api, metrics)
	}
	var apiIn, metricsIn bool
	for _, r := range p.Spec.Ingress {
		if kubePolicyAllows(c, r.Ports, api, corev1.ProtocolTCP) {
			open := len(r.From) == 0
			for _, f := range r.From {
				open = open || f.IPBlock != nil
			}
			apiIn = apiIn || open
		}
		if kubePolicyAllows(c, r.Ports, metrics, corev1.ProtocolTCP) {
			if len(r.From) == 0 {
				t.Errorf("%s: /metrics (port %d) open to everyone; it names tenants", where, metrics)
			}
			metricsIn = true
		}
	}
	if !apiIn || !metricsIn {
		t.Errorf("%s: ingress to the API port %d from the API server's addresses %v, to /metrics %d %v; want both", where, api, apiIn, metrics, metricsIn)
	}
	egress := func(port int32, proto corev1.Protocol, peer func(networkingv1.NetworkPolicyPeer) bool) bool {
		for _, r := range p.Spec.Egress {
			if !kubePolicyAllows(c, r.Ports, port, proto) {
				continue
			}
			if len(r.To) == 0 {
				return true
			}
			for _, to := range r.To {
				if peer(to) {
					return true
				}
			}
		}
		return false
	}
	anyPeer := func(networkingv1.NetworkPolicyPeer) bool { return true }
	replicas := func(to networkingv1.NetworkPolicyPeer) bool {
		return to.NamespaceSelector == nil && to.IPBlock == nil && to.PodSelector != nil && selects(to.PodSelector, w)
	}
	chPort := kubeClickHousePort(t, m, w)
	for _, e := range []struct {
		what  string
		port  int32
		proto corev1.Protocol
		peer  func(networkingv1.NetworkPolicyPeer) bool
	}{
		{"DNS over UDP", 53, corev1.ProtocolUDP, anyPeer},
		{"DNS over TCP", 53, corev1.ProtocolTCP, anyPeer},
		{"ClickHouse", chPort, corev1.ProtocolTCP, anyPeer},
		{"the Kubernetes API (its Service)", 443, corev1.ProtocolTCP, anyPeer},
		{"the Kubernetes API (its endpoints)", 6443, corev1.ProtocolTCP, anyPeer},
		{"the other replicas' API port", api, corev1.ProtocolTCP, replicas},
	} {
		if !egress(e.port, e.proto, e.peer) {
			t.Errorf("%s: no egress to %s (%s %d)", where, e.what, e.proto, e.port)
		}
	}
}

// kubeClickHousePort is the port of the config file's clickhouse.dsn, or
// the native protocol's 9000 where the config names none (the Secret's
// DSN is not in the manifests).
func kubeClickHousePort(t testing.TB, m kubeManifests, w kubeWorkload) int32 {
	t.Helper()
	var cfg struct {
		ClickHouse struct {
			DSN string `yaml:"dsn"`
		} `yaml:"clickhouse"`
	}
	for _, cm := range m.configMaps {
		if cm.Namespace != w.namespace || cm.Data["gpumeter.yaml"] == "" {
			continue
		}
		if err := yaml.Unmarshal([]byte(cm.Data["gpumeter.yaml"]), &cfg); err != nil {
			t.Errorf("ConfigMap %s: gpumeter.yaml: %v", cm.Name, err)
		}
	}
	if cfg.ClickHouse.DSN == "" {
		return 9000
	}
	u, err := url.Parse(cfg.ClickHouse.DSN)
	if err != nil || u.Port() == "" {
		t.Errorf("clickhouse.dsn %q has no port (%v)", cfg.ClickHouse.DSN, err)
		return 9000
	}
	p, _ := strconv.Atoi(u.Port())
	return int32(p)
}

// checkKubeHAWebhook: every webhook calls the server's Service, in its
// namespace, on the port that reaches serve's TLS listener, with the
// failurePolicy asked for.
func checkKubeHAWebhook(t testing.TB, m kubeManifests, w kubeWorkload, c *corev1.Container, want admissionregistrationv1.FailurePolicyType) {
	t.Helper()
	var n int
	for _, cfg := range m.webhooks {
		for _, h := range cfg.Webhooks {
			n++
			where := "ValidatingWebhookConfiguration/" + cfg.Name + " webhook " + h.Name
			if got := deref(h.FailurePolicy); got != want {
				t.Errorf("%s: failurePolicy %q; want %q", where, got, want)
			}
			ref := h.ClientConfig.Service
			if ref == nil {
				t.Errorf("%s: no service reference", where)
				continue
			}
			var reached bool
			for _, s := range m.services {
				if s.Namespace != ref.Namespace || s.Name != ref.Name || ref.Namespace != w.namespace ||
					!labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
					continue
				}
				for _, p := range s.Spec.Ports {
					if p.Port == cmp.Or(deref(ref.Port), 443) && kubeServiceTarget(w, p) == c && p.TargetPort.String() == "https" {
						reached = true
					}
				}
			}
			if !reached {
				t.Errorf("%s: service %s/%s port %d does not reach serve's https port in %s", where, ref.Namespace, ref.Name, deref(ref.Port), w.where)
			}
		}
	}
	if n == 0 {
		t.Errorf("no admission webhook")
	}
}

// kubeSecretSample stands in for a key of an external Secret when a
// command line is run: a certificate and its key (self-signed, for the
// Service's name, its own CA) and a DSN nothing answers.
func kubeSecretSample(t *testing.T, key string) string {
	t.Helper()
	testCert.once.Do(func() { testCert.cert, testCert.key, testCert.err = selfSigned("gpumeter.gpumeter.svc") })
	if testCert.err != nil {
		t.Fatal(testCert.err)
	}
	switch key {
	case "tls.crt", "ca.crt":
		return testCert.cert
	case "tls.key":
		return testCert.key
	case "dsn":
		return deployUnreachableDSN
	}
	t.Fatalf("no sample for Secret key %q", key)
	return ""
}

var testCert struct {
	once      sync.Once
	cert, key string
	err       error
}

func selfSigned(host string) (certPEM, keyPEM string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: host},
		DNSNames:              []string{host},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})), nil
}
