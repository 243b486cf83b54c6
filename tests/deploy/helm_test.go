package deploy

import (
	"path"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpumeter/gpumeter/tests/harness"
)

// helmNamespace is the release namespace of the renders below: the one
// whose external Secrets kubeExternalSecrets lists.
const helmNamespace = "gpumeter"

// helmNamespaceDoc stands for the namespace the operator creates and
// labels before installing (the chart does not create it; NOTES.txt says
// how to label it).
const helmNamespaceDoc = `apiVersion: v1
kind: Namespace
metadata:
  name: gpumeter
  labels:
    pod-security.kubernetes.io/enforce: privileged
`

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.LoadDir(harness.RepoFile(t, "deploy/helm/gpumeter"))
	if err != nil {
		t.Fatalf("loading deploy/helm/gpumeter: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	return c
}

// renderChart renders the chart as `helm template gpumeter
// deploy/helm/gpumeter -n gpumeter` would with overrides as --set-ish
// nested values, validating them against values.schema.json, in strict
// mode (a template naming a value that is not there fails). It returns the
// manifests by template path, without NOTES.txt, which it returns apart.
func renderChart(t *testing.T, c *chart.Chart, overrides map[string]any) (map[string][]byte, string, error) {
	t.Helper()
	vals, err := util.ToRenderValuesWithSchemaValidation(c, overrides,
		common.ReleaseOptions{Name: "gpumeter", Namespace: helmNamespace, Revision: 1, IsInstall: true}, nil, false)
	if err != nil {
		return nil, "", err
	}
	out, err := engine.Engine{Strict: true}.Render(c, vals)
	if err != nil {
		return nil, "", err
	}
	docs := map[string][]byte{}
	var notes string
	for name, text := range out {
		switch {
		case path.Base(name) == "NOTES.txt":
			notes = text
		case strings.HasSuffix(name, ".yaml"):
			docs[path.Base(name)] = []byte(text)
		}
	}
	docs["namespace (the operator's)"] = []byte(helmNamespaceDoc)
	return docs, notes, nil
}

// The chart renders with its defaults and with overrides, and each render
// decodes strictly into k8s.io/api types, passes the plain manifests'
// cross-checks (with its gpumeter command lines through the binary for the
// defaults and the client CA) and says what the values asked for: replicas,
// the disruption budget, the spread, the NetworkPolicy, the Lease RBAC, the
// probes, TLS, the webhook's failurePolicy and service, the DSN's Secret,
// the collector on or off.
func TestHelmChart(t *testing.T) {
	c := loadChart(t)
	base := kubeHAWant{replicas: 3, election: true, failurePolicy: admissionregistrationv1.Fail, collector: true,
		dsnSecret: "gpumeter-clickhouse", tlsSecret: "gpumeter-webhook-tls"}
	for _, tc := range []struct {
		name      string
		overrides map[string]any
		cli       bool
		want      func(*kubeHAWant)
		notes     string // NOTES.txt says it
	}{
		{"defaults", nil, true, func(*kubeHAWant) {}, "get lease gpumeter"},
		{"replicas 5", map[string]any{"server": map[string]any{"replicas": 5}}, false,
			func(w *kubeHAWant) { w.replicas = 5 }, "5 server replica(s)"},
		{"one replica without the election", map[string]any{"server": map[string]any{"replicas": 1, "election": map[string]any{"enabled": false}}}, true,
			func(w *kubeHAWant) { w.replicas, w.election = 1, false }, "1 server replica(s)"},
		{"failurePolicy Ignore", map[string]any{"webhook": map[string]any{"failurePolicy": "Ignore"}}, false,
			func(w *kubeHAWant) { w.failurePolicy = admissionregistrationv1.Ignore }, "admitted\nunchecked"},
		{"collector off", map[string]any{"collector": map[string]any{"enabled": false}}, false,
			func(w *kubeHAWant) { w.collector = false }, ""},
		{"client CA, one replica", map[string]any{"tls": map[string]any{"clientCA": map[string]any{"secretName": "gpumeter-client-ca"}},
			"server": map[string]any{"replicas": 1, "election": map[string]any{"enabled": false}}}, true,
			func(w *kubeHAWant) {
				w.replicas, w.election, w.clientCA, w.probeMetrics = 1, false, "gpumeter-client-ca", true
			}, "Secret gpumeter-client-ca (key ca.crt)"},
		{"client CA, the election, a forward certificate", map[string]any{
			"tls":    map[string]any{"clientCA": map[string]any{"secretName": "gpumeter-client-ca"}},
			"server": map[string]any{"election": map[string]any{"enabled": true, "forwardCert": map[string]any{"secretName": "gpumeter-forward-tls"}}},
		}, true, func(w *kubeHAWant) {
			w.clientCA, w.forwardCert, w.probeMetrics = "gpumeter-client-ca", "gpumeter-forward-tls", true
		}, "Secret gpumeter-forward-tls (type kubernetes.io/tls)"},
		{"client CA, certificates optional", map[string]any{
			"tls":    map[string]any{"clientCA": map[string]any{"secretName": "gpumeter-client-ca"}},
			"config": map[string]any{"server": map[string]any{"tls": map[string]any{"client_auth": "verify_if_given"}}},
		}, true, func(w *kubeHAWant) { w.clientCA = "gpumeter-client-ca" }, ""},
		{"probes on the metrics port", map[string]any{"server": map[string]any{"probePort": "metrics"}}, false,
			func(w *kubeHAWant) { w.probeMetrics = true }, ""},
		{"collector with HAMi billed by grants", map[string]any{"collector": map[string]any{"hami": true, "hamiBilling": "granted"}}, false,
			func(*kubeHAWant) {}, ""},
		{"collector without DRA or pod labels: no token, no RBAC", map[string]any{"collector": map[string]any{"dra": false, "kubeletPodLabels": false}}, false,
			func(*kubeHAWant) {}, ""},
		{"DSN secret", map[string]any{"clickhouse": map[string]any{"secretName": "ch-dsn", "secretKey": "dsn"}}, false,
			func(w *kubeHAWant) { w.dsnSecret = "ch-dsn" }, "Secret ch-dsn (key dsn)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "DSN secret" {
				kubeExternalSecrets[helmNamespace+"/ch-dsn"] = []string{"dsn"}
				t.Cleanup(func() { delete(kubeExternalSecrets, helmNamespace+"/ch-dsn") })
			}
			docs, notes, err := renderChart(t, c, tc.overrides)
			if err != nil {
				t.Fatal(err)
			}
			m := indexKubeManifests(t, docs)
			checkKubeAll(t, m, tc.cli)
			want := base
			tc.want(&want)
			checkKubeHA(t, m, want)
			if !strings.Contains(notes, tc.notes) {
				t.Errorf("NOTES.txt does not say %q:\n%s", tc.notes, notes)
			}
		})
	}
}

// Values the schema or the templates refuse fail the render: a
// failurePolicy the API server does not know, no replicas, no TLS secret
// (serve terminates TLS itself), a misspelt value the templates ask for.
func TestHelmChartRefusesBadValues(t *testing.T) {
	c := loadChart(t)
	for name, overrides := range map[string]map[string]any{
		"failurePolicy":                 {"webhook": map[string]any{"failurePolicy": "Deny"}},
		"replicas":                      {"server": map[string]any{"replicas": 0}},
		"tls":                           {"tls": map[string]any{"secretName": ""}},
		"probePort":                     {"server": map[string]any{"probePort": "http"}},
		"replicas without the election": {"server": map[string]any{"election": map[string]any{"enabled": false}}},
		"lease not whole seconds":       {"server": map[string]any{"election": map[string]any{"enabled": true, "leaseDuration": "1500ms"}}},
		"client certificates required with the election": {"tls": map[string]any{"clientCA": map[string]any{"secretName": "gpumeter-client-ca"}}},
		"hamiBilling":               {"collector": map[string]any{"hami": true, "hamiBilling": "cores"}},
		"hami without the pod list": {"collector": map[string]any{"hami": true, "kubeletPodLabels": false}},
	} {
		if _, _, err := renderChart(t, c, overrides); err == nil {
			t.Errorf("%s: %v rendered without an error", name, overrides)
		}
	}
	// The refusal names the way out.
	_, _, err := renderChart(t, c, map[string]any{"tls": map[string]any{"clientCA": map[string]any{"secretName": "gpumeter-client-ca"}}})
	if err == nil || !strings.Contains(err.Error(), "server.election.forwardCert.secretName") {
		t.Errorf("client certificates required with the election: %v; want the error to name server.election.forwardCert.secretName", err)
	}
}

// The HA checks fail where a render breaks what they assert: each case
// changes one thing of the default render after decoding.
func TestKubeHAChecksCatchBreakage(t *testing.T) {
	docs, _, err := renderChart(t, loadChart(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := kubeHAWant{replicas: 3, election: true, failurePolicy: admissionregistrationv1.Fail, collector: true,
		dsnSecret: "gpumeter-clickhouse", tlsSecret: "gpumeter-webhook-tls"}
	config := func(m *kubeManifests, edit func(string) string) {
		for _, cm := range m.configMaps {
			if cm.Data["gpumeter.yaml"] != "" {
				cm.Data["gpumeter.yaml"] = edit(cm.Data["gpumeter.yaml"])
			}
		}
	}
	type breakage struct {
		name   string
		break_ func(m *kubeManifests)
		report string
	}
	// Each breakage of the render is reported; the render itself is not.
	expectReports := func(docs map[string][]byte, want kubeHAWant, what string, cases []breakage) {
		t.Helper()
		for _, tc := range cases {
			m := indexKubeManifests(t, docs)
			tc.break_(&m)
			r := recorder{T: t}
			checkKubeHA(&r, m, want)
			if got := strings.Join(r.errs, "\n"); !strings.Contains(got, tc.report) {
				t.Errorf("%s: checkKubeHA reported %q; want it to mention %q", tc.name, got, tc.report)
			}
		}
		r := recorder{T: t}
		checkKubeHA(&r, indexKubeManifests(t, docs), want)
		sort.Strings(r.errs)
		if len(r.errs) > 0 {
			t.Errorf("%s: %q", what, r.errs)
		}
	}
	expectReports(docs, want, "the default render", []breakage{
		{"replicas", func(m *kubeManifests) { n := int32(4); w, _, _ := kubeServe(*m); *w.replicas = n }, "replicas 4; want 3"},
		{"no PDB", func(m *kubeManifests) { m.pdbs = nil }, "0 PodDisruptionBudgets"},
		{"PDB blocks drains", func(m *kubeManifests) {
			m.pdbs[0].Spec.MaxUnavailable.IntVal = 0
		}, "lets 0 of 3"},
		{"PDB lets two go", func(m *kubeManifests) {
			m.pdbs[0].Spec.MaxUnavailable.IntVal = 2
		}, "lets 2 of 3"},
		{"no election", func(m *kubeManifests) {
			config(m, func(s string) string { return strings.Replace(s, "backend: kubernetes", "backend: \"\"", 1) })
		}, `election backend ""`},
		{"the Lease elsewhere", func(m *kubeManifests) {
			config(m, func(s string) string { return strings.Replace(s, "namespace: gpumeter", "namespace: default", 1) })
		}, "want kubernetes, the Lease in gpumeter"},
		{"identity by name", func(m *kubeManifests) {
			_, c, _ := kubeServe(*m)
			for i := range c.Env {
				if c.Env[i].Name == "GPUMETER_ELECTION_IDENTITY" {
					c.Env[i].Value = "gpumeter:8443"
				}
			}
		}, "want $(POD_IP):8443"},
		{"identity on the metrics port", func(m *kubeManifests) {
			_, c, _ := kubeServe(*m)
			for i := range c.Env {
				if c.Env[i].Name == "GPUMETER_ELECTION_IDENTITY" {
					c.Env[i].Value = "$(POD_IP):9402"
				}
			}
		}, "want $(POD_IP):8443"},
		{"forward checks a pod's name", func(m *kubeManifests) {
			config(m, func(s string) string {
				return strings.Replace(s, "server_name: gpumeter.gpumeter.svc", "server_name: gpumeter-0", 1)
			})
		}, `server_name "gpumeter-0" is no Service`},
		{"forward CA from nowhere", func(m *kubeManifests) {
			config(m, func(s string) string {
				return strings.Replace(s, "ca_file: /etc/gpumeter-tls/ca.crt", "ca_file: /etc/ssl/ca.crt", 1)
			})
		}, "election.forward.ca_file"},
		{"a forward certificate not asked for", func(m *kubeManifests) {
			config(m, func(s string) string {
				return strings.Replace(s, "ca_file: /etc/gpumeter-tls/ca.crt", "ca_file: /etc/gpumeter-tls/ca.crt\n    cert_file: /etc/gpumeter-tls/tls.crt", 1)
			})
		}, "election.forward.cert_file"},
		{"soft spread only", func(m *kubeManifests) {
			w, _, _ := kubeServe(*m)
			w.template.Spec.TopologySpreadConstraints[0].WhenUnsatisfiable = "ScheduleAnyway"
		}, "hard spread by host name false"},
		{"no DNS", func(m *kubeManifests) { m.netpols[0].Spec.Egress = m.netpols[0].Spec.Egress[1:] }, "DNS over UDP"},
		{"metrics open", func(m *kubeManifests) { m.netpols[0].Spec.Ingress[1].From = nil }, "open to everyone"},
		{"lease delete", func(m *kubeManifests) {
			for k, r := range m.roles {
				if strings.HasPrefix(k, "Role/") {
					r[0].Verbs = append(r[0].Verbs, "delete")
				}
			}
		}, "is granted"},
		{"claims listed", func(m *kubeManifests) {
			for k, r := range m.roles {
				if strings.HasPrefix(k, "ClusterRole/") && slices.Contains(r[0].Resources, "resourceclaims") {
					r[0].Verbs = append(r[0].Verbs, "list")
				}
			}
		}, "or a ClusterRole of get on resourceclaims and resourceclaimtemplates only"},
		{"no token", func(m *kubeManifests) {
			_, c, _ := kubeServe(*m)
			for i, w := range m.workloads {
				if len(w.template.Spec.Containers) > 0 && &w.template.Spec.Containers[0] == c {
					m.workloads[i].template.Spec.AutomountServiceAccountToken = new(bool)
				}
			}
		}, "automountServiceAccountToken: true"},
		{"probe over HTTP", func(m *kubeManifests) { _, c, _ := kubeServe(*m); c.ReadinessProbe.HTTPGet.Scheme = "HTTP" }, "the port serves HTTPS"},
		{"probe on metrics", func(m *kubeManifests) {
			_, c, _ := kubeServe(*m)
			c.LivenessProbe.HTTPGet.Port = intstr.FromString("metrics")
			c.LivenessProbe.HTTPGet.Scheme = "HTTP"
		}, "want https over HTTPS"},
		{"failurePolicy", func(m *kubeManifests) {
			ig := admissionregistrationv1.Ignore
			m.webhooks[0].Webhooks[0].FailurePolicy = &ig
		}, `failurePolicy "Ignore"; want "Fail"`},
		{"webhook elsewhere", func(m *kubeManifests) { m.webhooks[0].Webhooks[0].ClientConfig.Service.Name = "gpumeter-metrics" }, "does not reach serve's https port"},
		{"DSN literal", func(m *kubeManifests) {
			_, c, _ := kubeServe(*m)
			for i := range c.Env {
				if c.Env[i].Name == "GPUMETER_CLICKHOUSE" {
					c.Env[i] = corev1EnvVar("GPUMETER_CLICKHOUSE", "clickhouse://u:p@ch:9000/db")
				}
			}
		}, "want Secret gpumeter-clickhouse key dsn"},
	})

	// With a forward certificate: its key file from outside its Secret,
	// or its volume gone, is reported.
	docs, _, err = renderChart(t, loadChart(t), map[string]any{
		"tls":    map[string]any{"clientCA": map[string]any{"secretName": "gpumeter-client-ca"}},
		"server": map[string]any{"election": map[string]any{"enabled": true, "forwardCert": map[string]any{"secretName": "gpumeter-forward-tls"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want.clientCA, want.forwardCert, want.probeMetrics = "gpumeter-client-ca", "gpumeter-forward-tls", true
	expectReports(docs, want, "the render with a forward certificate", []breakage{
		{"forward key from nowhere", func(m *kubeManifests) {
			config(m, func(s string) string {
				return strings.Replace(s, "key_file: /etc/gpumeter-forward-tls/tls.key", "key_file: /etc/ssl/forward.key", 1)
			})
		}, "election.forward.key_file"},
		{"forward certificate not mounted", func(m *kubeManifests) {
			_, c, _ := kubeServe(*m)
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == "/etc/gpumeter-forward-tls" })
		}, "election.forward.cert_file"},
	})
}

func corev1EnvVar(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }
