package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chart = "helm/anvil"

// helm runs go.mod's helm with the values as a file.
func helm(t *testing.T, values string, args ...string) (string, error) {
	t.Helper()
	// Not under t.TempDir: helm splits -f at commas, which subtest
	// names put in that path.
	tmp, err := os.CreateTemp("", "anvil-values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := tmp.Name()
	t.Cleanup(func() { os.Remove(f) })
	if _, err := tmp.WriteString(values); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command("go", append(append([]string{"tool", "helm"}, args...), chart, "-f", f)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String() + errOut.String(), err
	}
	return out.String(), nil
}

// manifests is one rendering decoded into the Kubernetes API's own types,
// refusing any field those types do not have.
type manifests struct {
	deployments []appsv1.Deployment
	pdbs        []policyv1.PodDisruptionBudget
	policies    []networkingv1.NetworkPolicy
	services    []corev1.Service
	configMaps  []corev1.ConfigMap
	secrets     []corev1.Secret
	claims      []corev1.PersistentVolumeClaim
	ingresses   []networkingv1.Ingress
	monitors    []serviceMonitor
}

// serviceMonitor is prometheus-operator's ServiceMonitor cut to the fields
// the chart writes: it is a CRD, with no type in k8s.io/api, and strict
// decoding into this refuses any other field as it does for the API's kinds.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
			// prometheus-operator's SafeAuthorization.
			Authorization struct {
				Type        string                   `json:"type"`
				Credentials corev1.SecretKeySelector `json:"credentials"`
			} `json:"authorization"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func strict(t *testing.T, doc []byte, into any) {
	t.Helper()
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%T: %v\n%s", into, err, doc)
	}
}

func decodeAll(t *testing.T, rendered string) manifests {
	t.Helper()
	var m manifests
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(rendered, -1) {
		var head struct{ Kind, APIVersion string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		switch head.APIVersion + " " + head.Kind {
		case " ":
			continue // only comments
		case "apps/v1 Deployment":
			m.deployments = append(m.deployments, appsv1.Deployment{})
			strict(t, []byte(doc), &m.deployments[len(m.deployments)-1])
		case "policy/v1 PodDisruptionBudget":
			m.pdbs = append(m.pdbs, policyv1.PodDisruptionBudget{})
			strict(t, []byte(doc), &m.pdbs[len(m.pdbs)-1])
		case "networking.k8s.io/v1 NetworkPolicy":
			m.policies = append(m.policies, networkingv1.NetworkPolicy{})
			strict(t, []byte(doc), &m.policies[len(m.policies)-1])
		case "v1 Service":
			m.services = append(m.services, corev1.Service{})
			strict(t, []byte(doc), &m.services[len(m.services)-1])
		case "v1 ConfigMap":
			m.configMaps = append(m.configMaps, corev1.ConfigMap{})
			strict(t, []byte(doc), &m.configMaps[len(m.configMaps)-1])
		case "v1 PersistentVolumeClaim":
			m.claims = append(m.claims, corev1.PersistentVolumeClaim{})
			strict(t, []byte(doc), &m.claims[len(m.claims)-1])
		case "v1 Secret":
			m.secrets = append(m.secrets, corev1.Secret{})
			strict(t, []byte(doc), &m.secrets[len(m.secrets)-1])
		case "networking.k8s.io/v1 Ingress":
			m.ingresses = append(m.ingresses, networkingv1.Ingress{})
			strict(t, []byte(doc), &m.ingresses[len(m.ingresses)-1])
		case "monitoring.coreos.com/v1 ServiceMonitor":
			m.monitors = append(m.monitors, serviceMonitor{})
			strict(t, []byte(doc), &m.monitors[len(m.monitors)-1])
		default:
			t.Fatalf("unexpected manifest %s %s", head.APIVersion, head.Kind)
		}
	}
	return m
}

// secrets are what the chart needs besides its defaults: the Secret's
// values, and for the default two replicas a shared volume.
const secrets = `
sharedStorage: {existingClaim: anvil-state}
secret:
  databaseDSN: postgres://anvil:pw@db.example:5432/anvil
  sessionSecret: s3cret
`

func TestHelmChart(t *testing.T) {
	for _, c := range []struct {
		name   string
		values string
		check  func(t *testing.T, m manifests)
	}{
		{"defaults", secrets, func(t *testing.T, m manifests) {
			if len(m.deployments) != 1 || *m.deployments[0].Spec.Replicas != 2 || len(m.pdbs) != 1 || len(m.secrets) != 1 || len(m.services) != 1 {
				t.Fatalf("rendered %d deployments, %d PDBs, %d secrets", len(m.deployments), len(m.pdbs), len(m.secrets))
			}
			pod := m.deployments[0].Spec.Template.Spec
			ctr := pod.Containers[0]
			// The image is a release's: the newest version CHANGELOG.md
			// has a section for, the tag go tool task release gives it.
			if want := newestRelease(t); !strings.HasSuffix(ctr.Image, ":"+want) {
				t.Errorf("image %s, want the newest release's tag %s (Chart.yaml appVersion)", ctr.Image, want)
			}
			if ctr.ReadinessProbe == nil || ctr.ReadinessProbe.HTTPGet.Path != "/readyz" || ctr.LivenessProbe == nil || ctr.LivenessProbe.HTTPGet.Path != "/healthz" {
				t.Errorf("probes: readiness %+v, liveness %+v", ctr.ReadinessProbe, ctr.LivenessProbe)
			}
			if ctr.Resources.Requests.Cpu().IsZero() || ctr.Resources.Requests.Memory().IsZero() {
				t.Errorf("no resource requests: %+v", ctr.Resources)
			}
			if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
				t.Error("pods may run as root")
			}
			env := map[string]corev1.EnvVar{}
			for _, e := range ctr.Env {
				env[e.Name] = e
			}
			for _, k := range []string{"ANVIL_DATABASE", "ANVIL_SESSION_SECRET", "ANVIL_OIDC_CLIENT_SECRET", "ANVIL_WEBHOOK_SECRET", "ANVIL_METRICS_TOKEN"} {
				if env[k].ValueFrom == nil || env[k].ValueFrom.SecretKeyRef == nil || env[k].ValueFrom.SecretKeyRef.Name != m.secrets[0].Name {
					t.Errorf("%s does not come from the chart's Secret: %+v", k, env[k])
				}
			}
			// The optional ones are read only when the Secret holds them.
			for _, k := range []string{"ANVIL_OIDC_CLIENT_SECRET", "ANVIL_WEBHOOK_SECRET", "ANVIL_METRICS_TOKEN"} {
				if ref := env[k].ValueFrom.SecretKeyRef; ref.Optional == nil || !*ref.Optional {
					t.Errorf("%s is required from the Secret: %+v", k, ref)
				}
			}
			if len(m.secrets[0].StringData) != 2 {
				t.Errorf("the Secret holds %v, want only the DSN and session secret when no optional one is given", m.secrets[0].StringData)
			}
			if env["ANVIL_CONFIG"].Value != "/etc/anvil/anvil.yaml" || m.secrets[0].StringData["database-dsn"] == "" {
				t.Errorf("config %+v, secret %v", env["ANVIL_CONFIG"], m.secrets[0].StringData)
			}
			if m.pdbs[0].Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("PDB %+v", m.pdbs[0].Spec)
			}
			if len(m.ingresses) != 0 || len(m.monitors) != 0 {
				t.Errorf("rendered %d Ingresses, %d ServiceMonitors by default", len(m.ingresses), len(m.monitors))
			}
			// Two replicas share the operator's claim, and make none.
			if claim := stateClaim(m.deployments[0]); claim != "anvil-state" || len(m.claims) != 0 {
				t.Errorf("state volume on claim %q, %d claims rendered; want the existing anvil-state", claim, len(m.claims))
			}
			consoleOnPodIP(t, m)
		}},
		{"shared storage the chart creates, for every group", `
secret: {existingSecret: anvil-prod}
sharedStorage: {create: true, storageClassName: cephfs, size: 20Gi}
conductorGroups: [{name: "", replicas: 2}, {name: rack-a, replicas: 1}]
`, func(t *testing.T, m manifests) {
			if len(m.claims) != 1 {
				t.Fatalf("rendered %d claims, want 1", len(m.claims))
			}
			pvc := m.claims[0]
			if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "cephfs" || pvc.Spec.Resources.Requests.Storage().String() != "20Gi" {
				t.Errorf("claim %+v, want ReadWriteMany of cephfs, 20Gi", pvc.Spec)
			}
			// Every replica of every group mounts that one volume.
			for _, d := range m.deployments {
				if claim := stateClaim(d); claim != pvc.Name {
					t.Errorf("%s's state volume is on claim %q, want %s", d.Name, claim, pvc.Name)
				}
			}
		}},
		{"one replica keeps its own state", secrets + `
sharedStorage: {existingClaim: ""}
conductorGroups: [{name: "", replicas: 1}]
`, func(t *testing.T, m manifests) {
			for _, v := range m.deployments[0].Spec.Template.Spec.Volumes {
				if v.Name == "state" && v.EmptyDir == nil {
					t.Errorf("one replica's state volume %+v, want an emptyDir", v.VolumeSource)
				}
			}
			if len(m.claims) != 0 {
				t.Errorf("rendered %d claims for one replica without sharedStorage", len(m.claims))
			}
		}},
		{"consoles between replicas, BMC and agent networks let in", secrets + `
console: {portRange: "10000:10099"}
bmcNetworks: [10.20.0.0/16]
agentNetworks: [10.40.0.0/16, 10.20.0.0/16]
networkPolicy:
  ingressFrom:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress}}
`, func(t *testing.T, m manifests) {
			consoleOnPodIP(t, m)
			var cfg map[string]any
			if err := yaml.Unmarshal([]byte(m.configMaps[0].Data["anvil.yaml"]), &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg["console_port_range"] != "10000:10099" {
				t.Errorf("anvil.yaml %v lacks console_port_range 10000:10099", cfg)
			}
			np := m.policies[0].Spec
			pods := m.deployments[0].Spec.Template.Labels
			// ours: the peer is the chart's pods (every group's).
			ours := func(p networkingv1.NetworkPolicyPeer) bool {
				if p.PodSelector == nil || len(p.PodSelector.MatchLabels) == 0 || p.IPBlock != nil || p.NamespaceSelector != nil {
					return false
				}
				for k, v := range p.PodSelector.MatchLabels {
					if pods[k] != v || k == "anvil.dev/conductor-group" {
						return false
					}
				}
				return true
			}
			consolePorts := func(ps []networkingv1.NetworkPolicyPort) bool {
				return len(ps) == 1 && ps[0].Port.IntValue() == 10000 && ps[0].EndPort != nil && *ps[0].EndPort == 10099 && *ps[0].Protocol == corev1.ProtocolTCP
			}
			var in6385 []string
			consoleIn, consoleOut := false, false
			for _, r := range np.Ingress {
				if len(r.Ports) == 1 && r.Ports[0].Port.IntValue() == 6385 {
					for _, p := range r.From {
						if p.IPBlock != nil {
							in6385 = append(in6385, p.IPBlock.CIDR)
						}
					}
				}
				if consolePorts(r.Ports) && len(r.From) == 1 && ours(r.From[0]) {
					consoleIn = true
				}
			}
			for _, r := range np.Egress {
				if consolePorts(r.Ports) && len(r.To) == 1 && ours(r.To[0]) {
					consoleOut = true
				}
			}
			if !slices.Equal(in6385, []string{"10.20.0.0/16", "10.40.0.0/16"}) {
				t.Errorf("the API lets in %v besides ingressFrom, want the BMC and agent networks", in6385)
			}
			if !consoleIn || !consoleOut {
				t.Errorf("console range between the replicas: ingress %v, egress %v\n%+v", consoleIn, consoleOut, np)
			}
		}},
		{"ingress", secrets + `
ingress:
  enabled: true
  className: nginx
  hosts: [anvil.example.com, bmc.example.com]
  tlsSecret: anvil-tls
  annotations: {nginx.ingress.kubernetes.io/proxy-body-size: 2g}
`, func(t *testing.T, m manifests) {
			if len(m.ingresses) != 1 {
				t.Fatalf("rendered %d Ingresses", len(m.ingresses))
			}
			ing := m.ingresses[0]
			if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" || ing.Annotations["nginx.ingress.kubernetes.io/proxy-body-size"] != "2g" {
				t.Errorf("class %v, annotations %v", ing.Spec.IngressClassName, ing.Annotations)
			}
			hosts := []string{"anvil.example.com", "bmc.example.com"}
			if len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "anvil-tls" || !slices.Equal(ing.Spec.TLS[0].Hosts, hosts) {
				t.Errorf("TLS %+v", ing.Spec.TLS)
			}
			var ruled []string
			for _, r := range ing.Spec.Rules {
				ruled = append(ruled, r.Host)
				for _, p := range r.HTTP.Paths {
					b := p.Backend.Service
					if p.Path != "/" || p.PathType == nil || *p.PathType != networkingv1.PathTypePrefix || b.Name != m.services[0].Name || b.Port.Name != m.services[0].Spec.Ports[0].Name {
						t.Errorf("%s: path %s to %+v, want / (Prefix) to the Service %s port %s", r.Host, p.Path, b, m.services[0].Name, m.services[0].Spec.Ports[0].Name)
					}
				}
			}
			if !slices.Equal(ruled, hosts) {
				t.Errorf("rules for %v, want %v", ruled, hosts)
			}
		}},
		{"ServiceMonitor with the chart's Secret", secrets + `
  metricsToken: scrape-t0ken
serviceMonitor:
  enabled: true
  interval: 15s
  labels: {release: kube-prometheus-stack}
`, func(t *testing.T, m manifests) {
			if len(m.monitors) != 1 || len(m.monitors[0].Spec.Endpoints) != 1 {
				t.Fatalf("ServiceMonitors %+v", m.monitors)
			}
			sm, svc := m.monitors[0], m.services[0]
			if sm.Metadata.Labels["release"] != "kube-prometheus-stack" {
				t.Errorf("labels %v", sm.Metadata.Labels)
			}
			// It must select the chart's Service and no other.
			if len(sm.Spec.Selector.MatchLabels) == 0 {
				t.Error("the ServiceMonitor selects every Service")
			}
			for k, v := range sm.Spec.Selector.MatchLabels {
				if svc.Labels[k] != v {
					t.Errorf("selector %s=%s, the Service has %v", k, v, svc.Labels)
				}
			}
			ep := sm.Spec.Endpoints[0]
			if ep.Port != svc.Spec.Ports[0].Name || ep.Path != "/metrics" || ep.Interval != "15s" {
				t.Errorf("endpoint %+v, want port %s, /metrics, 15s", ep, svc.Spec.Ports[0].Name)
			}
			if cr := ep.Authorization.Credentials; ep.Authorization.Type != "Bearer" || cr.Name != m.secrets[0].Name || m.secrets[0].StringData[cr.Key] != "scrape-t0ken" {
				t.Errorf("authorization %+v; the Secret %s holds %v", ep.Authorization, m.secrets[0].Name, m.secrets[0].StringData)
			}
		}},
		{"ServiceMonitor with an existing secret", `
sharedStorage: {existingClaim: anvil-state}
secret: {existingSecret: anvil-prod, metricsTokenKey: scrape-token}
serviceMonitor: {enabled: true}
`, func(t *testing.T, m manifests) {
			if len(m.monitors) != 1 || len(m.monitors[0].Spec.Endpoints) != 1 {
				t.Fatalf("ServiceMonitors %+v", m.monitors)
			}
			ref := m.monitors[0].Spec.Endpoints[0].Authorization.Credentials
			if ref.Name != "anvil-prod" || ref.Key != "scrape-token" {
				t.Errorf("bearer token from %+v, want anvil-prod's scrape-token", ref)
			}
			// Prometheus must send the token the pods require.
			var pods *corev1.SecretKeySelector
			for _, e := range m.deployments[0].Spec.Template.Spec.Containers[0].Env {
				if e.Name == "ANVIL_METRICS_TOKEN" && e.ValueFrom != nil {
					pods = e.ValueFrom.SecretKeyRef
				}
			}
			if pods == nil || pods.Name != ref.Name || pods.Key != ref.Key {
				t.Errorf("pods read the token from %+v, Prometheus from %+v", pods, ref)
			}
		}},
		{"conductor groups, BMC networks, existing secret", `
sharedStorage: {existingClaim: anvil-state}
secret: {existingSecret: anvil-prod}
conductorGroups:
  - {name: "", replicas: 2}
  - {name: rack-a, replicas: 3}
  - {name: Rack_B.2, replicas: 1}
bmcNetworks: [10.20.0.0/16, 10.30.1.0/24]
agentNetworks: [10.40.0.0/16]
networkPolicy:
  databaseCIDRs: [10.0.5.10/32]
  ingressFrom:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress}}
config:
  agent_api_url: https://anvil.example.com
  allocation_max_lease: 72h
`, func(t *testing.T, m manifests) {
			if len(m.secrets) != 0 {
				t.Error("rendered a Secret beside existingSecret")
			}
			groups := map[string]int32{}
			for _, d := range m.deployments {
				for _, e := range d.Spec.Template.Spec.Containers[0].Env {
					if e.Name == "ANVIL_CONDUCTOR_GROUP" {
						groups[e.Value] = *d.Spec.Replicas
					}
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != "anvil-prod" {
						t.Errorf("%s reads secret %s", e.Name, e.ValueFrom.SecretKeyRef.Name)
					}
				}
			}
			if len(groups) != 3 || groups[""] != 2 || groups["rack-a"] != 3 || groups["Rack_B.2"] != 1 || len(m.pdbs) != 3 {
				t.Errorf("conductor groups %v, %d PDBs", groups, len(m.pdbs))
			}
			var cidrs []string
			for _, r := range m.policies[0].Spec.Egress {
				for _, p := range r.To {
					if p.IPBlock != nil {
						cidrs = append(cidrs, p.IPBlock.CIDR)
					}
				}
			}
			if !slices.Equal(cidrs, []string{"10.0.5.10/32", "10.20.0.0/16", "10.30.1.0/24", "10.40.0.0/16"}) {
				t.Errorf("egress CIDRs %v", cidrs)
			}
			// Anvil itself enforces the BMC networks the policy opens.
			var cfg map[string]any
			if err := yaml.Unmarshal([]byte(m.configMaps[0].Data["anvil.yaml"]), &cfg); err != nil {
				t.Fatal(err)
			}
			if nets, _ := cfg["bmc_networks"].([]any); len(nets) != 2 || cfg["allocation_max_lease"] != "72h" {
				t.Errorf("anvil.yaml %v", cfg)
			}
		}},
		{"optional secrets in the Secret, never the ConfigMap", secrets + `
  oidcClientSecret: oidc-s3cret
  webhookSecret: hook-s3cret
  metricsToken: scrape-t0ken
config:
  oidc_issuer: https://sso.example.com
  webhook_url: https://hooks.example.com/anvil
`, func(t *testing.T, m manifests) {
			want := map[string]string{"oidc-client-secret": "oidc-s3cret", "webhook-secret": "hook-s3cret", "metrics-token": "scrape-t0ken"}
			for k, v := range want {
				if m.secrets[0].StringData[k] != v {
					t.Errorf("Secret key %s = %q, want %q", k, m.secrets[0].StringData[k], v)
				}
			}
			for _, v := range want {
				if strings.Contains(m.configMaps[0].Data["anvil.yaml"], v) {
					t.Errorf("the ConfigMap holds the secret %q:\n%s", v, m.configMaps[0].Data["anvil.yaml"])
				}
			}
		}},
		{"no network policy or PDB", secrets + `
networkPolicy: {enabled: false}
podDisruptionBudget: {enabled: false}
conductorGroups: [{name: "", replicas: 1}]
`, func(t *testing.T, m manifests) {
			if len(m.policies) != 0 || len(m.pdbs) != 0 || len(m.deployments) != 1 {
				t.Errorf("%d policies, %d PDBs, %d deployments", len(m.policies), len(m.pdbs), len(m.deployments))
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if out, err := helm(t, c.values, "lint", "--strict"); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
			out, err := helm(t, c.values, "template", "anvil")
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, out)
			}
			c.check(t, decodeAll(t, out))
		})
	}
	// Values the chart refuses, naming what is wrong.
	for values, want := range map[string]string{
		"secret: {sessionSecret: x}":                                         "secret.databaseDSN",
		secrets + "config: {database: x}":                                    "config.database is set by the chart",
		"secret: {databaseDSN: /var/lib/anvil/anvil.db, sessionSecret: x}":   "must be a postgres:// DSN",
		"secret: {databaseDSN: 'sqlite:///data/anvil.db', sessionSecret: x}": "must be a postgres:// DSN",
		secrets + "config: {oidc_client_secret: x}":                          "config.oidc_client_secret is a secret",
		secrets + "config: {metrics_token: x}":                               "config.metrics_token is a secret",
		secrets + "config: {webhook_url: 'https://h.example/a'}":             "config.webhook_url needs secret.webhookSecret",
		secrets + "serviceMonitor: {enabled: true}":                          "serviceMonitor.enabled needs secret.metricsToken",
		secrets + "ingress: {enabled: true, className: nginx}":               "ingress.enabled needs ingress.hosts",
		// Replicas serve what another wrote: not from per-pod storage.
		strings.ReplaceAll(secrets, "anvil-state", `""`):                                                          "2 replicas need sharedStorage",
		strings.ReplaceAll(secrets, "anvil-state", `""`) + "conductorGroups: [{name: a, replicas: 1}, {name: b}]": "2 replicas need sharedStorage",
		secrets + "config: {console_host: 127.0.0.1}":                                                             "config.console_host is set by the chart",
		secrets + "console: {portRange: '10000-10099'}":                                                           "console.portRange",
	} {
		if out, err := helm(t, values, "template", "anvil"); err == nil || !strings.Contains(out, want) {
			t.Errorf("values %q: %v, output lacks %q:\n%s", values, err, want, out)
		}
	}
}

// stateClaim is the claim a Deployment's state volume is on ("" for
// none).
// newestRelease is the version of CHANGELOG.md's first release section
// (after Unreleased), with its leading v.
func newestRelease(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+[^\]]*)\]`).FindSubmatch(b)
	if m == nil {
		t.Fatal("CHANGELOG.md has no release section")
	}
	return "v" + string(m[1])
}

func stateClaim(d appsv1.Deployment) string {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "state" && v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}

// consoleOnPodIP checks every Deployment's conductor binds its consoles
// to the pod's IP (which their URLs name), not loopback, so that the
// portal of any replica reaches them.
func consoleOnPodIP(t *testing.T, m manifests) {
	t.Helper()
	for _, d := range m.deployments {
		var host *corev1.EnvVar
		for i, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "ANVIL_CONSOLE_HOST" {
				host = &d.Spec.Template.Spec.Containers[0].Env[i]
			}
		}
		if host == nil || host.ValueFrom == nil || host.ValueFrom.FieldRef == nil || host.ValueFrom.FieldRef.FieldPath != "status.podIP" {
			t.Errorf("%s: ANVIL_CONSOLE_HOST %+v, want the downward API's status.podIP", d.Name, host)
		}
	}
}
