package deploy

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// kubeExternalSecrets are the Secrets the manifests use but do not ship
// (they hold a password and a private key; configmap.yaml and server.yaml
// say how to create them), with the keys the manifests may reference. The
// client CA and the forward's client certificate are the chart's options
// (helm_test.go).
var kubeExternalSecrets = map[string][]string{
	"gpumeter/gpumeter-clickhouse":  {"dsn"},
	"gpumeter/gpumeter-webhook-tls": {"tls.crt", "tls.key", "ca.crt"},
	"gpumeter/gpumeter-client-ca":   {"ca.crt"},
	"gpumeter/gpumeter-forward-tls": {"tls.crt", "tls.key"},
}

// kubeFieldSamples stand in for the downward API when a test expands
// $(VAR) in container arguments as the kubelet would.
var kubeFieldSamples = map[string]string{
	"spec.nodeName": "gpu-node-01",
	"status.hostIP": "10.0.0.11",
	"status.podIP":  "10.0.3.7",
}

// kubeObject is one decoded manifest document.
type kubeObject struct {
	file string
	obj  runtime.Object
}

func kubeDecoder() *serializerjson.Serializer {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme,
		rbacv1.AddToScheme, admissionregistrationv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err) // static registration of k8s.io/api types
		}
	}
	return serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory, scheme, scheme,
		serializerjson.SerializerOptions{Yaml: true, Strict: true})
}

// decodeManifests decodes every document of data strictly: a field the
// k8s.io/api type lacks, a field given twice, or a kind not registered is
// an error.
func decodeManifests(dec *serializerjson.Serializer, name string, data []byte) ([]kubeObject, error) {
	var out []kubeObject
	var errs []error
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(bytes.TrimSpace(stripYAMLComments(doc))) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: document %d: %w", name, i, err))
			continue
		}
		out = append(out, kubeObject{file: name, obj: obj})
	}
	return out, errors.Join(errs...)
}

func stripYAMLComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

// kubeManifests are deploy/kubernetes/*.yaml or the chart's rendered
// templates, decoded.
type kubeManifests struct {
	objects    []kubeObject
	namespaces map[string]*corev1.Namespace
	configMaps map[string]*corev1.ConfigMap // namespace/name
	accounts   map[string]*corev1.ServiceAccount
	services   []*corev1.Service
	roles      map[string][]rbacv1.PolicyRule // ClusterRole/name or Role/namespace/name
	bindings   []kubeBinding
	webhooks   []*admissionregistrationv1.ValidatingWebhookConfiguration
	workloads  []kubeWorkload
	pdbs       []*policyv1.PodDisruptionBudget
	netpols    []*networkingv1.NetworkPolicy
}

type kubeBinding struct {
	name     string
	roleKey  string
	subjects []rbacv1.Subject
}

// kubeWorkload is a Deployment, DaemonSet or Job: its pod template.
type kubeWorkload struct {
	where     string // kind/namespace/name
	namespace string
	selector  *metav1.LabelSelector
	template  corev1.PodTemplateSpec
	replicas  *int32 // a Deployment's
}

func loadKubeManifests(t *testing.T) kubeManifests {
	t.Helper()
	files, err := filepath.Glob(harness.RepoFile(t, "deploy/kubernetes/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes (%v)", err)
	}
	docs := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[filepath.Base(f)] = data
	}
	return indexKubeManifests(t, docs)
}

// indexKubeManifests decodes every document of docs (file name → content)
// strictly and indexes the objects by kind.
func indexKubeManifests(t *testing.T, docs map[string][]byte) kubeManifests {
	t.Helper()
	dec := kubeDecoder()
	m := kubeManifests{namespaces: map[string]*corev1.Namespace{}, configMaps: map[string]*corev1.ConfigMap{},
		accounts: map[string]*corev1.ServiceAccount{}, roles: map[string][]rbacv1.PolicyRule{}}
	names := make([]string, 0, len(docs))
	for name := range docs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		objs, err := decodeManifests(dec, name, docs[name])
		if err != nil {
			t.Fatal(err)
		}
		m.objects = append(m.objects, objs...)
	}
	seen := map[string]string{}
	for _, o := range m.objects {
		meta := o.obj.(metav1.Object)
		kind := fmt.Sprintf("%T", o.obj)
		key := kind + " " + meta.GetNamespace() + "/" + meta.GetName()
		if prev, dup := seen[key]; dup {
			t.Errorf("%s: %s also in %s", o.file, key, prev)
		}
		seen[key] = o.file
		nsName := meta.GetNamespace() + "/" + meta.GetName()
		switch v := o.obj.(type) {
		case *corev1.Namespace:
			m.namespaces[v.Name] = v
		case *corev1.ConfigMap:
			m.configMaps[nsName] = v
		case *corev1.ServiceAccount:
			m.accounts[nsName] = v
		case *corev1.Service:
			m.services = append(m.services, v)
		case *rbacv1.ClusterRole:
			m.roles["ClusterRole/"+v.Name] = v.Rules
		case *rbacv1.Role:
			m.roles["Role/"+nsName] = v.Rules
		case *rbacv1.ClusterRoleBinding:
			m.bindings = append(m.bindings, kubeBinding{"ClusterRoleBinding/" + v.Name, v.RoleRef.Kind + "/" + v.RoleRef.Name, v.Subjects})
		case *rbacv1.RoleBinding:
			ref := v.RoleRef.Kind + "/" + v.RoleRef.Name
			if v.RoleRef.Kind == "Role" {
				ref = "Role/" + v.Namespace + "/" + v.RoleRef.Name
			}
			m.bindings = append(m.bindings, kubeBinding{"RoleBinding/" + nsName, ref, v.Subjects})
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			m.webhooks = append(m.webhooks, v)
		case *appsv1.Deployment:
			m.workloads = append(m.workloads, kubeWorkload{"Deployment/" + nsName, v.Namespace, v.Spec.Selector, v.Spec.Template, v.Spec.Replicas})
		case *appsv1.DaemonSet:
			m.workloads = append(m.workloads, kubeWorkload{"DaemonSet/" + nsName, v.Namespace, v.Spec.Selector, v.Spec.Template, nil})
		case *batchv1.Job:
			m.workloads = append(m.workloads, kubeWorkload{"Job/" + nsName, v.Namespace, nil, v.Spec.Template, nil})
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, v)
		case *networkingv1.NetworkPolicy:
			m.netpols = append(m.netpols, v)
		default:
			t.Errorf("%s: %s: no cross-reference checks for this kind here", o.file, key)
		}
	}
	return m
}

// A typo in a field name, a field given twice and an unknown kind are
// each refused, so the manifests below decode into exactly what they say.
func TestKubeStrictDecodingRefusesUnknownFields(t *testing.T) {
	dec := kubeDecoder()
	for name, doc := range map[string]string{
		"typo":      "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      hostPid: true\n",
		"duplicate": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  type: ClusterIP\n  type: NodePort\n",
		"kind":      "apiVersion: v1\nkind: Sevrice\nmetadata: {name: x}\n",
	} {
		if _, err := decodeManifests(dec, name, []byte(doc)); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
	if objs, err := decodeManifests(dec, "ok", []byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n---\n# only a comment\n")); err != nil || len(objs) != 1 {
		t.Errorf("a valid manifest: %d objects, %v", len(objs), err)
	}
}

// Every manifest in deploy/kubernetes decodes strictly into k8s.io/api
// types, and what the objects say of each other holds: names and
// namespaces, labels and selectors, ports, volumes and mounts, ConfigMap
// and Secret keys, service accounts and RBAC, the webhook's service, and
// the gpumeter command lines, which the CLI's own flag parsing accepts.
func TestKubeManifests(t *testing.T) {
	m := loadKubeManifests(t)
	checkKubeAll(t, m, true)
	checkKubeHA(t, m, kubeHAWant{replicas: 3, election: true, failurePolicy: admissionregistrationv1.Fail, collector: true,
		dsnSecret: "gpumeter-clickhouse", tlsSecret: "gpumeter-webhook-tls"})
}

// checkKubeAll holds a set of manifests to the cross-checks of
// TestKubeManifests; cli runs the gpumeter command lines through the binary
// too (seconds per set).
func checkKubeAll(t *testing.T, m kubeManifests, cli bool) {
	t.Helper()
	for _, o := range m.objects {
		checkKubeMeta(t, o, m)
	}
	if len(m.workloads) == 0 {
		t.Fatal("no workloads")
	}
	uid := imageUID(t)
	var gpumeterImage string
	cmds := map[string]int{}
	for _, w := range m.workloads {
		checkKubeWorkload(t, m, w)
		for _, c := range w.template.Spec.Containers {
			if !isGpumeterImage(c.Image) {
				continue
			}
			if gpumeterImage == "" {
				gpumeterImage = c.Image
			} else if c.Image != gpumeterImage {
				t.Errorf("%s: container %s runs %s, others %s", w.where, c.Name, c.Image, gpumeterImage)
			}
			if len(c.Command) > 0 {
				t.Errorf("%s: container %s overrides the image's entrypoint (gpumeter) with %q", w.where, c.Name, c.Command)
			}
			if !cli {
				continue
			}
			inv := checkKubeCommand(t, m, w, c)
			cmds[inv.command]++
			switch inv.command {
			case "collect":
				checkKubeCollector(t, m, w, c, inv)
			case "serve":
				checkKubeServer(t, m, w, c, inv, uid)
			}
		}
	}
	// Which of them must be there is checkKubeHA's (the collector may be
	// turned off in the chart).
	for _, cmd := range []string{"collect", "serve", "migrate"} {
		if cmds[cmd] > 1 {
			t.Errorf("%d containers run gpumeter %s; want at most 1", cmds[cmd], cmd)
		}
	}
	checkKubeRBAC(t, m)
	checkKubeServices(t, m)
	checkKubeWebhooks(t, m)
	checkKubePrometheusTarget(t, m)
}

func isGpumeterImage(image string) bool {
	name, _, _ := strings.Cut(image, ":")
	return name == "gpumeter" || strings.HasSuffix(name, "/gpumeter")
}

func checkKubeMeta(t *testing.T, o kubeObject, m kubeManifests) {
	t.Helper()
	meta := o.obj.(metav1.Object)
	where := fmt.Sprintf("%s: %T %s", o.file, o.obj, meta.GetName())
	for _, p := range validation.IsDNS1123Subdomain(meta.GetName()) {
		t.Errorf("%s: name: %s", where, p)
	}
	_, clusterScoped := map[string]bool{"*v1.Namespace": true, "*v1.ClusterRole": true, "*v1.ClusterRoleBinding": true,
		"*v1.ValidatingWebhookConfiguration": true}[fmt.Sprintf("%T", o.obj)]
	switch ns := meta.GetNamespace(); {
	case clusterScoped && ns != "":
		t.Errorf("%s: cluster-scoped object with namespace %q", where, ns)
	case !clusterScoped && m.namespaces[ns] == nil:
		t.Errorf("%s: namespace %q is not among the manifests", where, ns)
	}
	checkKubeLabels(t, where, meta.GetLabels())
}

func checkKubeLabels(t *testing.T, where string, l map[string]string) {
	t.Helper()
	for k, v := range l {
		for _, p := range validation.IsQualifiedName(k) {
			t.Errorf("%s: label key %q: %s", where, k, p)
		}
		for _, p := range validation.IsValidLabelValue(v) {
			t.Errorf("%s: label %s=%q: %s", where, k, v, p)
		}
	}
}

// kubeVolumeFiles materializes the ConfigMap volumes a container mounts
// under dir, at dir+mountPath, as the kubelet would project them, and the
// external Secrets' volumes with stand-ins (kubeSecretSample).
func kubeVolumeFiles(t *testing.T, m kubeManifests, w kubeWorkload, c corev1.Container, dir string) []string {
	t.Helper()
	var mounts []string
	for _, vm := range c.VolumeMounts {
		v := kubeVolume(w, vm.Name)
		files := map[string]string{}
		switch {
		case v == nil:
			continue
		case v.ConfigMap != nil:
			cm := m.configMaps[w.namespace+"/"+v.ConfigMap.Name]
			if cm == nil {
				continue // reported by checkKubeWorkload
			}
			if len(v.ConfigMap.Items) == 0 {
				for k, d := range cm.Data {
					files[k] = d
				}
			}
			for _, it := range v.ConfigMap.Items {
				files[it.Path] = cm.Data[it.Key]
			}
		case v.Secret != nil:
			keys := kubeExternalSecrets[w.namespace+"/"+v.Secret.SecretName]
			if len(v.Secret.Items) == 0 {
				for _, k := range keys {
					files[k] = kubeSecretSample(t, k)
				}
			}
			for _, it := range v.Secret.Items {
				files[it.Path] = kubeSecretSample(t, it.Key)
			}
		default:
			continue
		}
		root := filepath.Join(dir, vm.MountPath)
		for p, d := range files {
			if vm.SubPath != "" {
				if p != vm.SubPath {
					continue
				}
				p = ""
			}
			f := filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(d), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		mounts = append(mounts, vm.MountPath)
	}
	return mounts
}

func kubeVolume(w kubeWorkload, name string) *corev1.Volume {
	for i, v := range w.template.Spec.Volumes {
		if v.Name == name {
			return &w.template.Spec.Volumes[i]
		}
	}
	return nil
}

// kubeMount is the mount of c that holds path, the deepest one.
func kubeMount(c corev1.Container, path string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		if within(path, vm.MountPath) && (best == nil || len(vm.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	return best
}

var kubeVarRE = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// kubeExpand expands $(VAR) in s from c's env as the kubelet does, with
// downward-API fields from kubeFieldSamples; an undefined variable (which
// the kubelet would leave as it is) is an error.
func kubeExpand(t *testing.T, where string, c corev1.Container, s string) string {
	t.Helper()
	return kubeVarRE.ReplaceAllStringFunc(s, func(ref string) string {
		name := kubeVarRE.FindStringSubmatch(ref)[1]
		for _, e := range c.Env {
			if e.Name != name {
				continue
			}
			switch {
			case e.ValueFrom == nil:
				return e.Value
			case e.ValueFrom.FieldRef != nil:
				if v, ok := kubeFieldSamples[e.ValueFrom.FieldRef.FieldPath]; ok {
					return v
				}
			}
			t.Errorf("%s: %s: $(%s) comes from a source this test cannot stand in for", where, s, name)
			return ref
		}
		t.Errorf("%s: %s: $(%s) is not in the container's env", where, s, name)
		return ref
	})
}

// checkKubeCommand runs a gpumeter container's arguments through the CLI,
// with $(VAR) expanded and the ConfigMap files it mounts (the config file,
// the map file) in a temporary directory.
func checkKubeCommand(t *testing.T, m kubeManifests, w kubeWorkload, c corev1.Container) deployInvocation {
	t.Helper()
	where := w.where + " container " + c.Name
	dir := t.TempDir()
	mounts := kubeVolumeFiles(t, m, w, c, dir)
	rewrite := func(v string) string {
		for _, mp := range mounts {
			if within(v, mp) {
				return filepath.Join(dir, v)
			}
		}
		return v
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		a = kubeExpand(t, where, c, a)
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "-") {
			a = k + "=" + rewrite(v)
		} else {
			a = rewrite(a)
		}
		args[i] = a
	}
	// gpumeter's own variables with a value (GPUMETER_ELECTION_IDENTITY,
	// $(POD_IP) expanded) reach the command as the kubelet passes them;
	// those from Secrets are stood in for by checkDeployCommand.
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "GPUMETER_") && e.ValueFrom == nil {
			t.Setenv(e.Name, kubeExpand(t, where, c, e.Value))
		}
	}
	inv := checkDeployCommand(t, where, args)
	if p, ok := flagValue(args, "config"); !ok || !strings.HasPrefix(p, dir) {
		t.Errorf("%s: --config %q is not a file of a mounted ConfigMap", where, p)
	}
	return inv
}

func checkKubeWorkload(t *testing.T, m kubeManifests, w kubeWorkload) {
	t.Helper()
	spec := w.template.Spec
	checkKubeLabels(t, w.where+" pod template", w.template.Labels)
	if w.selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(w.template.Labels)) {
			t.Errorf("%s: selector %s does not select its pod template's labels %v (%v)", w.where, metav1.FormatLabelSelector(w.selector), w.template.Labels, err)
		}
	}
	if sa := m.accounts[w.namespace+"/"+spec.ServiceAccountName]; spec.ServiceAccountName == "" || sa == nil {
		t.Errorf("%s: service account %q is not among the manifests", w.where, spec.ServiceAccountName)
	}
	if spec.SecurityContext == nil || spec.SecurityContext.SeccompProfile == nil || spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: no RuntimeDefault seccomp profile", w.where)
	}
	if (spec.HostPID || kubeUsesHostPath(spec)) && m.namespaces[w.namespace] != nil &&
		m.namespaces[w.namespace].Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("%s: uses hostPID or hostPath, which namespace %s's Pod Security level refuses", w.where, w.namespace)
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		for _, p := range validation.IsDNS1123Label(v.Name) {
			t.Errorf("%s: volume %q: %s", w.where, v.Name, p)
		}
		if _, dup := volumes[v.Name]; dup {
			t.Errorf("%s: volume %q twice", w.where, v.Name)
		}
		volumes[v.Name] = v
		switch {
		case v.ConfigMap != nil:
			cm := m.configMaps[w.namespace+"/"+v.ConfigMap.Name]
			if cm == nil {
				t.Errorf("%s: volume %s: ConfigMap %s is not among the manifests", w.where, v.Name, v.ConfigMap.Name)
				continue
			}
			for _, it := range v.ConfigMap.Items {
				if _, ok := cm.Data[it.Key]; !ok {
					t.Errorf("%s: volume %s: ConfigMap %s has no key %q", w.where, v.Name, cm.Name, it.Key)
				}
			}
		case v.Secret != nil:
			keys, ok := kubeExternalSecrets[w.namespace+"/"+v.Secret.SecretName]
			if !ok {
				t.Errorf("%s: volume %s: Secret %s is neither among the manifests nor a documented external one", w.where, v.Name, v.Secret.SecretName)
			}
			for _, it := range v.Secret.Items {
				if !slices.Contains(keys, it.Key) {
					t.Errorf("%s: volume %s: Secret %s has no key %q", w.where, v.Name, v.Secret.SecretName, it.Key)
				}
			}
		}
	}
	mounted := map[string]bool{}
	containerNames := map[string]bool{}
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		where := w.where + " container " + c.Name
		for _, p := range validation.IsDNS1123Label(c.Name) {
			t.Errorf("%s: name: %s", where, p)
		}
		if containerNames[c.Name] {
			t.Errorf("%s: container name twice", where)
		}
		containerNames[c.Name] = true
		paths := map[string]bool{}
		for _, vm := range c.VolumeMounts {
			v, ok := volumes[vm.Name]
			if !ok {
				t.Errorf("%s: mount %s: no volume %q", where, vm.MountPath, vm.Name)
			}
			if paths[vm.MountPath] {
				t.Errorf("%s: two mounts at %s", where, vm.MountPath)
			}
			paths[vm.MountPath] = true
			mounted[vm.Name] = true
			if (v.ConfigMap != nil || v.Secret != nil) && !vm.ReadOnly {
				t.Errorf("%s: mount %s of a ConfigMap or Secret is not readOnly", where, vm.MountPath)
			}
		}
		for _, e := range c.Env {
			if len(validation.IsEnvVarName(e.Name)) > 0 {
				t.Errorf("%s: env %q: not a valid name", where, e.Name)
			}
			if e.ValueFrom == nil {
				continue
			}
			switch r := e.ValueFrom; {
			case r.SecretKeyRef != nil:
				if !slices.Contains(kubeExternalSecrets[w.namespace+"/"+r.SecretKeyRef.Name], r.SecretKeyRef.Key) {
					t.Errorf("%s: env %s: Secret %s key %s is not a documented external one", where, e.Name, r.SecretKeyRef.Name, r.SecretKeyRef.Key)
				}
			case r.ConfigMapKeyRef != nil:
				cm := m.configMaps[w.namespace+"/"+r.ConfigMapKeyRef.Name]
				if cm == nil || cm.Data[r.ConfigMapKeyRef.Key] == "" {
					t.Errorf("%s: env %s: ConfigMap %s key %s missing", where, e.Name, r.ConfigMapKeyRef.Name, r.ConfigMapKeyRef.Key)
				}
			case r.FieldRef != nil:
				if _, ok := kubeFieldSamples[r.FieldRef.FieldPath]; !ok {
					t.Errorf("%s: env %s: field %s has no sample in this test", where, e.Name, r.FieldRef.FieldPath)
				}
			}
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			for _, e := range validation.IsValidPortName(p.Name) {
				t.Errorf("%s: port name %q: %s", where, p.Name, e)
			}
			if _, dup := ports[p.Name]; dup {
				t.Errorf("%s: port name %q twice", where, p.Name)
			}
			ports[p.Name] = p.ContainerPort
		}
		for name, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			if pr == nil {
				if !strings.HasPrefix(w.where, "Job/") {
					t.Errorf("%s: no %s probe", where, name)
				}
				continue
			}
			var port intstr.IntOrString
			switch {
			case pr.HTTPGet != nil:
				port = pr.HTTPGet.Port
			case pr.TCPSocket != nil:
				port = pr.TCPSocket.Port
			default:
				t.Errorf("%s: %s probe is neither httpGet nor tcpSocket", where, name)
				continue
			}
			if kubeContainerPort(c, port) == 0 {
				t.Errorf("%s: %s probe port %s is none of the container's ports", where, name, port.String())
			}
		}
		checkKubeResources(t, where, c.Resources)
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s: securityContext must forbid privilege escalation, mount the root file system read-only and drop ALL capabilities", where)
		}
		if sc != nil && sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: privileged", where)
		}
	}
	for name := range volumes {
		if !mounted[name] {
			t.Errorf("%s: volume %s is mounted by no container", w.where, name)
		}
	}
}

func kubeUsesHostPath(spec corev1.PodSpec) bool {
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			return true
		}
	}
	return false
}

// kubeContainerPort resolves a named or numbered port to one of c's
// container ports; 0 when it is none of them.
func kubeContainerPort(c corev1.Container, port intstr.IntOrString) int32 {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return p.ContainerPort
		}
	}
	return 0
}

func checkKubeResources(t *testing.T, where string, r corev1.ResourceRequirements) {
	t.Helper()
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := r.Requests[name]
		lim, okLim := r.Limits[name]
		if !okReq || !okLim {
			t.Errorf("%s: %s request %v and limit %v both wanted", where, name, okReq, okLim)
			continue
		}
		if req.Cmp(lim) > 0 {
			t.Errorf("%s: %s request %s above its limit %s", where, name, req.String(), lim.String())
		}
	}
}

// checkKubeCollector: the DaemonSet reaches what its collect flags name.
func checkKubeCollector(t *testing.T, m kubeManifests, w kubeWorkload, c corev1.Container, inv deployInvocation) {
	t.Helper()
	where := w.where + " container " + c.Name
	spec := w.template.Spec
	f := inv.collect
	if !strings.HasPrefix(w.where, "DaemonSet/") {
		t.Errorf("%s: collect runs outside a DaemonSet", where)
	}
	if !spec.HostPID || f.procRoot != "/proc" {
		t.Errorf("%s: hostPID %v, --proc-root %q: cgroup attribution needs the host's PIDs in /proc", where, spec.HostPID, f.procRoot)
	}
	if rc := deref(spec.RuntimeClassName); rc != "nvidia" {
		t.Errorf("%s: runtimeClassName %q; want nvidia (NVML comes from the NVIDIA container runtime)", where, rc)
	}
	if spec.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("%s: nodeSelector %v does not pick GPU nodes (nvidia.com/gpu.present=true)", where, spec.NodeSelector)
	}
	if f.host != kubeFieldSamples["spec.nodeName"] {
		t.Errorf("%s: --host is %q; want the node's name (an env from spec.nodeName), not the pod's", where, f.host)
	}
	if f.simulate || f.sink != "clickhouse" {
		t.Errorf("%s: --simulate %v, --sink %q: the DaemonSet must meter the node into ClickHouse", where, f.simulate, f.sink)
	}
	// Host paths: each the same on the host as in the container, mounted
	// from a hostPath volume, read-only unless the collector writes there.
	spool := f.spoolDir
	if spool == "" {
		spool = inv.cfg.Collector.Spool.Dir
	}
	for _, p := range []struct {
		flag, path string
		write      bool
	}{
		{"--spool", spool, true},
		{"--kubelet-socket", filepath.Dir(f.kubeletSocket), false},
		{"--pod-log-dir", f.podLogDir, false},
	} {
		vm := kubeMount(c, p.path)
		if vm == nil {
			t.Errorf("%s: %s %s is on no mounted volume", where, p.flag, p.path)
			continue
		}
		v := kubeVolume(w, vm.Name)
		if v == nil || v.HostPath == nil || !within(p.path, vm.MountPath) ||
			filepath.Join(v.HostPath.Path, strings.TrimPrefix(p.path, vm.MountPath)) != p.path {
			t.Errorf("%s: %s %s: mount %s is not the host's own %s", where, p.flag, p.path, vm.MountPath, p.path)
		}
		if vm.ReadOnly == p.write {
			t.Errorf("%s: %s %s: readOnly %v", where, p.flag, p.path, vm.ReadOnly)
		}
	}
	if f.mapFile == "" {
		t.Errorf("%s: no --map-file", where)
	} else if _, err := attribution.LoadMapping(f.mapFile); err != nil {
		t.Errorf("%s: the map file does not load: %v", where, err)
	}
	if port := listenPort(t, where, f.listen); kubeContainerPort(c, intstr.FromInt32(port)) == 0 {
		t.Errorf("%s: --listen %s is none of the container's ports", where, f.listen)
	}
	checkKubeHealthProbes(t, where, c, f.listen, "")

	sa := m.accounts[w.namespace+"/"+spec.ServiceAccountName]
	token := sa != nil && (sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken) &&
		(spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken)
	granted := kubeGrants(m, w.namespace, spec.ServiceAccountName)
	// The kubelet's /pods is nodes/pods; DRA devices (--node-name) are
	// resolved from the node's ResourceSlices, read from the API server.
	var want []rbacv1.PolicyRule
	if f.podsURL != "" {
		if !token || f.podsTokenFile != attribution.DefaultPodLabelsConfig().TokenFile {
			t.Errorf("%s: --kubelet-pods-url needs the service-account token mounted (%v) and sent (%q)", where, token, f.podsTokenFile)
		}
		want = append(want, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/pods"}, Verbs: []string{"get"}})
	}
	if f.nodeName != "" {
		if !token {
			t.Errorf("%s: --node-name reads ResourceSlices from the API server: it needs the service-account token mounted", where)
		}
		want = append(want, rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch"}})
	}
	switch {
	case len(want) > 0 && !kubeRuleSetsEqual(granted, want):
		t.Errorf("%s: the collector is granted %+v; want only %+v (get on nodes/pods for --kubelet-pods-url, get/list/watch on resourceslices for --node-name)", where, granted, want)
	case len(want) == 0 && (token || len(granted) > 0):
		t.Errorf("%s: without --kubelet-pods-url and --node-name the collector needs no token (%v) and no RBAC (%+v)", where, token, granted)
	}
}

// kubeRuleSetsEqual reports whether two rule lists hold the same rules,
// in any order.
func kubeRuleSetsEqual(a, b []rbacv1.PolicyRule) bool {
	key := func(rules []rbacv1.PolicyRule) []string {
		out := make([]string, 0, len(rules))
		for _, r := range rules {
			j, _ := json.Marshal(r)
			out = append(out, string(j))
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

// deref is *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func kubeRulesEqual(a, b []rbacv1.PolicyRule) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// kubeGrants is every rule bound to a service account.
func kubeGrants(m kubeManifests, namespace, account string) []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	for _, b := range m.bindings {
		for _, s := range b.subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Namespace == namespace && s.Name == account {
				rules = append(rules, m.roles[b.roleKey]...)
			}
		}
	}
	return rules
}

// checkKubeHealthProbes: liveness on /healthz and readiness on /readyz of
// the port the command listens on, over TLS where it serves TLS; or, for
// serve, of its metrics listener (plain HTTP, the same two paths), which
// metricsListen names ("" for a command without one).
func checkKubeHealthProbes(t testing.TB, where string, c corev1.Container, listen, metricsListen string) {
	t.Helper()
	port := listenPort(t, where, listen)
	var metrics int32 = -1
	if metricsListen != "" {
		metrics = listenPort(t, where, metricsListen)
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s: want an httpGet probe of %s", where, p.path)
			continue
		}
		scheme := corev1.URISchemeHTTP
		switch got := kubeContainerPort(c, p.probe.HTTPGet.Port); got {
		case port:
			if _, tls := flagValue(c.Args, "tls-cert"); tls {
				scheme = corev1.URISchemeHTTPS
			}
		case metrics:
		default:
			t.Errorf("%s: the probe of %s is on port %d; want the --listen port %d", where, p.path, got, port)
			continue
		}
		if got := cmp.Or(p.probe.HTTPGet.Scheme, corev1.URISchemeHTTP); got != scheme {
			t.Errorf("%s: the probe of %s asks over %s; the port serves %s", where, p.path, got, scheme)
		}
	}
}

// checkKubeServer: serve's port, probes and user, its TLS from the mounted
// Secret, and no sidecar: serve terminates TLS itself.
func checkKubeServer(t *testing.T, m kubeManifests, w kubeWorkload, c corev1.Container, inv deployInvocation, uid int64) {
	t.Helper()
	where := w.where + " container " + c.Name
	listen, _ := flagValue(inv.cmdArgs, "listen")
	if listen == "" {
		listen = inv.cfg.Server.Listen
	}
	port := listenPort(t, where, listen)
	if host := strings.TrimSuffix(listen, fmt.Sprintf(":%d", port)); host == "127.0.0.1" || host == "localhost" {
		t.Errorf("%s: --listen %s is loopback only: the Service cannot reach it", where, listen)
	}
	metrics, ok := flagValue(inv.cmdArgs, "metrics-listen")
	if !ok {
		metrics = inv.cfg.Server.MetricsListen
	}
	checkKubeHealthProbes(t, where, c, listen, metrics)
	if mport := listenPort(t, where, metrics); kubeContainerPort(c, intstr.FromInt32(mport)) == 0 || mport == port {
		t.Errorf("%s: --metrics-listen %s: want a container port of its own, apart from the API's %d", where, metrics, port)
	}
	psc := w.template.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != uid {
		t.Errorf("%s: want runAsNonRoot and runAsUser %d, the Dockerfile's USER", where, uid)
	}
	for _, s := range w.template.Spec.Containers {
		if s.Name != c.Name {
			t.Errorf("%s: sidecar %s: serve terminates TLS itself and needs none", where, s.Name)
		}
	}
	if _, plain := flagValue(c.Args, "plain-http"); plain || inv.cfg.Server.PlainHTTP {
		t.Errorf("%s: serve with --plain-http on %s: the API, portal and webhook would cross the cluster network unencrypted", where, listen)
	}
	for _, flag := range []string{"tls-cert", "tls-key", "tls-client-ca"} {
		p, ok := flagValue(c.Args, flag)
		if !ok && flag == "tls-client-ca" {
			continue
		}
		if !ok || kubeSecretFile(w, c, p) == "" {
			t.Errorf("%s: --%s %q is no key of a mounted Secret", where, flag, p)
		}
		if vm := kubeMount(c, p); vm != nil && vm.SubPath != "" {
			t.Errorf("%s: --%s %q is mounted by subPath, which the kubelet never updates: a renewed certificate would not reach serve", where, flag, p)
		}
	}
}

// kubeSecretFile is the Secret whose key path is, as c mounts it ("" when
// none).
func kubeSecretFile(w kubeWorkload, c corev1.Container, path string) string {
	vm := kubeMount(c, path)
	if vm == nil {
		return ""
	}
	v := kubeVolume(w, vm.Name)
	if v == nil || v.Secret == nil {
		return ""
	}
	rel := strings.TrimPrefix(path, vm.MountPath+"/")
	key := rel
	if len(v.Secret.Items) > 0 {
		key = ""
		for _, it := range v.Secret.Items {
			if it.Path == rel {
				key = it.Key
			}
		}
	}
	if !slices.Contains(kubeExternalSecrets[w.namespace+"/"+v.Secret.SecretName], key) {
		return ""
	}
	return v.Secret.SecretName
}

// checkKubeRBAC: bindings name roles and accounts that exist, and no rule
// grants more than reading.
func checkKubeRBAC(t *testing.T, m kubeManifests) {
	t.Helper()
	for _, b := range m.bindings {
		if _, ok := m.roles[b.roleKey]; !ok {
			t.Errorf("%s: role %s is not among the manifests", b.name, b.roleKey)
		}
		for _, s := range b.subjects {
			if s.Kind != rbacv1.ServiceAccountKind || m.accounts[s.Namespace+"/"+s.Name] == nil {
				t.Errorf("%s: subject %s %s/%s is not a service account of the manifests", b.name, s.Kind, s.Namespace, s.Name)
			}
		}
	}
	for key, rules := range m.roles {
		for _, r := range rules {
			// The one write: the leader election's Lease, in a Role of
			// the server's own namespace.
			lease := strings.HasPrefix(key, "Role/") && slices.Equal(r.APIGroups, []string{"coordination.k8s.io"}) && slices.Equal(r.Resources, []string{"leases"})
			for _, v := range r.Verbs {
				if v != "get" && v != "list" && v != "watch" && !(lease && (v == "create" || v == "update")) {
					t.Errorf("%s: verb %q on %v: gpumeter only reads, but for its Lease", key, v, r.Resources)
				}
			}
			for _, res := range append(append(append([]string(nil), r.Resources...), r.APIGroups...), r.Verbs...) {
				if res == "*" {
					t.Errorf("%s: wildcard in %+v", key, r)
				}
			}
			for _, res := range r.Resources {
				if res == "secrets" || res == "nodes/proxy" || strings.HasSuffix(res, "/exec") {
					t.Errorf("%s: %s is more than gpumeter needs", key, res)
				}
			}
		}
	}
}

// checkKubeServices: each Service selects the pods of one workload and its
// target ports are ports of those pods.
func checkKubeServices(t *testing.T, m kubeManifests) {
	t.Helper()
	for _, s := range m.services {
		where := "Service/" + s.Namespace + "/" + s.Name
		for _, p := range validation.IsDNS1123Label(s.Name) {
			t.Errorf("%s: name: %s", where, p)
		}
		var selected []kubeWorkload
		for _, w := range m.workloads {
			if w.namespace == s.Namespace && len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
				selected = append(selected, w)
			}
		}
		if len(selected) != 1 {
			t.Errorf("%s: selector %v selects %d workloads; want 1", where, s.Spec.Selector, len(selected))
			continue
		}
		names := map[string]bool{}
		for _, p := range s.Spec.Ports {
			if names[p.Name] {
				t.Errorf("%s: port name %q twice", where, p.Name)
			}
			names[p.Name] = true
			if kubeServiceTarget(selected[0], p) == nil {
				t.Errorf("%s: port %s targetPort %s is no container port of %s", where, p.Name, p.TargetPort.String(), selected[0].where)
			}
		}
	}
}

// kubeServiceTarget is the container behind a Service port.
func kubeServiceTarget(w kubeWorkload, p corev1.ServicePort) *corev1.Container {
	target := p.TargetPort
	if target.Type == intstr.Int && target.IntVal == 0 {
		target = intstr.FromInt32(p.Port)
	}
	for i, c := range w.template.Spec.Containers {
		if kubeContainerPort(c, target) != 0 {
			return &w.template.Spec.Containers[i]
		}
	}
	return nil
}

// checkKubeWebhooks: the webhook calls the server's Service on a port
// that reaches serve's TLS listener, at a route the server has, with a
// failurePolicy said outright, and never applies to gpumeter's own
// namespace.
func checkKubeWebhooks(t *testing.T, m kubeManifests) {
	t.Helper()
	if len(m.webhooks) == 0 {
		t.Fatal("no ValidatingWebhookConfiguration")
	}
	routes := openAPIPosts(t)
	for _, cfg := range m.webhooks {
		for _, h := range cfg.Webhooks {
			where := "ValidatingWebhookConfiguration/" + cfg.Name + " webhook " + h.Name
			if se := deref(h.SideEffects); !slices.Contains(h.AdmissionReviewVersions, "v1") || (se != admissionregistrationv1.SideEffectClassNone && se != admissionregistrationv1.SideEffectClassNoneOnDryRun) {
				t.Errorf("%s: admissionReviewVersions %v (want v1), sideEffects %q (want None or NoneOnDryRun)", where, h.AdmissionReviewVersions, se)
			}
			ref := h.ClientConfig.Service
			if ref == nil || h.ClientConfig.URL != nil {
				t.Errorf("%s: not a service reference", where)
				continue
			}
			if p := deref(ref.Path); !routes[p] {
				t.Errorf("%s: path %q is no POST route of internal/server/openapi.json", where, p)
			}
			var svc *corev1.Service
			for _, s := range m.services {
				if s.Namespace == ref.Namespace && s.Name == ref.Name {
					svc = s
				}
			}
			if svc == nil {
				t.Errorf("%s: Service %s/%s is not among the manifests", where, ref.Namespace, ref.Name)
				continue
			}
			port := int32(443)
			if ref.Port != nil {
				port = *ref.Port
			}
			var target *corev1.Container
			for _, p := range svc.Spec.Ports {
				if p.Port != port {
					continue
				}
				for _, w := range m.workloads {
					if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
						target = kubeServiceTarget(w, p)
					}
				}
			}
			switch _, tls := flagValue(deref(target).Args, "tls-cert"); {
			case target == nil:
				t.Errorf("%s: port %d of Service %s reaches no container", where, port, svc.Name)
			case !isGpumeterImage(target.Image) || !slices.Contains(target.Args, "serve"):
				t.Errorf("%s: port %d reaches %s, not gpumeter serve", where, port, target.Name)
			case !tls:
				t.Errorf("%s: port %d reaches %s, which speaks plain HTTP; the API server calls webhooks over TLS", where, port, target.Name)
			}
			if fp := deref(h.FailurePolicy); fp != admissionregistrationv1.Fail && fp != admissionregistrationv1.Ignore {
				t.Errorf("%s: failurePolicy %q: say Fail or Ignore", where, fp)
			}
			if h.NamespaceSelector == nil {
				t.Errorf("%s: no namespaceSelector: it would apply to gpumeter's own pods", where)
			} else if sel, err := metav1.LabelSelectorAsSelector(h.NamespaceSelector); err != nil || sel.Empty() || m.namespaces[ref.Namespace] == nil || sel.Matches(labels.Set(m.namespaces[ref.Namespace].Labels)) {
				t.Errorf("%s: namespaceSelector %v (%v) applies to namespace %s, where the server itself runs", where, h.NamespaceSelector, err, ref.Namespace)
			}
			var pods bool
			for _, r := range h.Rules {
				pods = pods || (slices.Contains(r.Resources, "pods") && slices.Contains(r.Operations, admissionregistrationv1.Create))
			}
			if !pods {
				t.Errorf("%s: no rule for creating pods", where)
			}
		}
	}
}

// openAPIPosts are the POST paths of the server's OpenAPI document, which
// TestOpenAPIMatchesRoutes holds to the routes the server registers.
func openAPIPosts(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(harness.RepoFile(t, "internal/server/openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for p, ops := range doc.Paths {
		if _, ok := ops["post"]; ok {
			out[p] = true
		}
	}
	return out
}

// checkKubePrometheusTarget: deploy/prometheus scrapes the server at the
// Service's name and http port.
func checkKubePrometheusTarget(t *testing.T, m kubeManifests) {
	t.Helper()
	data, err := os.ReadFile(harness.RepoFile(t, "deploy/prometheus/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	// /metrics names tenants: it has a Service of its own, apart from the
	// one the API and portal are reached by.
	var want []string
	for _, s := range m.services {
		var http, metrics bool
		for _, p := range s.Spec.Ports {
			switch p.Name {
			case "metrics":
				metrics = true
				want = append(want, fmt.Sprintf("%s:%d", s.Name, p.Port))
			case "http", "https":
				http = true
			}
		}
		if http && metrics {
			t.Errorf("Service %s exposes the API and /metrics together", s.Name)
		}
	}
	var got []string
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName == "gpumeter-server" {
			for _, st := range sc.StaticConfigs {
				got = append(got, st.Targets...)
			}
		}
	}
	sort.Strings(got)
	if len(want) != 1 || !slices.Contains(got, want[0]) {
		t.Errorf("deploy/prometheus/prometheus.yml scrapes the server at %v; the Service's metrics port is %v", got, want)
	}
}
