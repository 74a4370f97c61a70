package fidelity_test

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The server every test talks to: one `egrid serve` process for the package, HTTPS with a
// self-signed certificate for 127.0.0.1 that the tests' clients trust and that egrid trusts
// for the test endpoints (SSL_CERT_FILE), so endpoints are HTTPS too.
var (
	serverURL string       // https://127.0.0.1:<port>
	client    *http.Client // trusts the certificate
	tlsCert   tls.Certificate
	serverLog *lockedBuffer // egrid's stderr, printed when a test fails
)

// Identity of the server's topics: every topic ID is
// /subscriptions/<azureSubscriptionID>/resourceGroups/<resourceGroup>/providers/Microsoft.EventGrid/topics/<name>.
const (
	azureSubscriptionID = "5f0c1a52-8a3d-4f7e-9d51-0c6a8f7b2e10"
	resourceGroup       = "rg-fidelity"
	adminToken          = "fidelity-admin"
)

// topicKey is the key1 of every topic the tests create.
var topicKey = base64.StdEncoding.EncodeToString([]byte("egrid fidelity test key, 32 bytes"))

func topicID(name string) string {
	return "/subscriptions/" + azureSubscriptionID + "/resourceGroups/" + resourceGroup + "/providers/Microsoft.EventGrid/topics/" + name
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "egrid-fidelity-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary := filepath.Join(dir, "egrid")
	build := exec.Command("go", "build", "-o", binary, "github.com/egridio/egrid/cmd/egrid")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building egrid:", err)
		return 1
	}
	certFile, keyFile, pool, err := selfSigned(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if tlsCert, err = tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: time.Minute}
	cfg := filepath.Join(dir, "egrid.yaml")
	yaml := "server:\n  adminToken: " + adminToken + "\n  azureSubscriptionId: " + azureSubscriptionID + "\n  resourceGroup: " + resourceGroup + "\n" +
		"  egress: {allow: [127.0.0.1]}\n" // the test endpoints listen on loopback, which egrid serve denies by default
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := exec.Command(binary, "serve", "--listen", "127.0.0.1:0", "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
		"--tls-cert", certFile, "--tls-key", keyFile)
	cmd.Env = append(os.Environ(), "EGRID_ADMIN_TOKEN=", "SSL_CERT_FILE="+certFile)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	serverLog = &lockedBuffer{}
	urls := make(chan string, 1)
	exited := make(chan error, 1)
	serving := regexp.MustCompile(`egrid serving.*url=(https://[0-9.:]+)`)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			serverLog.write(sc.Text() + "\n")
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		exited <- cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	select {
	case serverURL = <-urls:
	case err := <-exited:
		fmt.Fprintf(os.Stderr, "egrid serve exited early: %v\n%s", err, serverLog.String())
		return 1
	case <-time.After(60 * time.Second):
		fmt.Fprintf(os.Stderr, "egrid serve did not start within 60 s\n%s", serverLog.String())
		return 1
	}
	return m.Run()
}

// lockedBuffer collects the server's log lines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) write(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logOnFailure prints the server's log when t fails.
func logOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("egrid serve log:\n%s", serverLog.String())
		}
	})
}

// selfSigned writes a certificate and key for 127.0.0.1 and returns their paths and a pool
// trusting the certificate.
func selfSigned(dir string) (certFile, keyFile string, pool *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egrid fidelity"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", "", nil, err
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool, nil
}

// request is one request an endpoint received.
type request struct {
	method string
	header http.Header
	body   []byte
}

// kind is the request's aeg-event-type, or its method when it has none (OPTIONS).
func (r request) kind() string {
	if k := r.header.Get("aeg-event-type"); k != "" {
		return k
	}
	return r.method
}

// endpoint is an HTTPS webhook that answers the handshakes as Event Grid handlers do (unless
// refuse is set) and records every request.
type endpoint struct {
	srv  *httptest.Server
	got  chan request
	mu   sync.Mutex
	deny bool // refuse validation handshakes
	next http.Handler
}

// newEndpoint starts an endpoint. next, when not nil, answers the deliveries (Notification
// requests) instead of a plain 200.
func newEndpoint(t *testing.T, next http.Handler) *endpoint {
	e := &endpoint{got: make(chan request, 100), next: next}
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(e.serve))
	e.srv.TLS = &tls.Config{Certificates: []tls.Certificate{tlsCert}}
	e.srv.StartTLS()
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) url(path string) string { return e.srv.URL + path }

func (e *endpoint) refuse(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.deny = on
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := request{method: r.Method, header: r.Header.Clone(), body: body}
	e.got <- req
	e.mu.Lock()
	deny := e.deny
	e.mu.Unlock()
	switch {
	case r.Method == http.MethodOptions:
		if deny {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("WebHook-Allowed-Origin", r.Header.Get("WebHook-Request-Origin"))
	case req.kind() == "SubscriptionValidation":
		if deny {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		var evs []struct {
			Data struct {
				ValidationCode string `json:"validationCode"`
			} `json:"data"`
		}
		_ = json.Unmarshal(body, &evs)
		if len(evs) == 1 {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"validationResponse": evs[0].Data.ValidationCode})
		}
	case req.kind() == "Notification" && e.next != nil:
		r.Body = io.NopCloser(bytes.NewReader(body))
		e.next.ServeHTTP(w, r)
	}
}

// await returns the next request of the given kind (aeg-event-type, or OPTIONS), skipping
// others, failing after a bound.
func (e *endpoint) await(t *testing.T, kind string) request {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case r := <-e.got:
			if r.kind() == kind {
				return r
			}
		case <-timeout:
			t.Fatalf("no %s request within 60 s", kind)
		}
	}
}

// call sends an HTTP request to the server and returns the status and body.
func call(t *testing.T, method, path string, header map[string]string, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, serverURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, got
}

// admin calls the admin API.
func admin(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	return call(t, method, path, map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json"}, body)
}

// createTopic creates a topic with key1 topicKey; properties is the rest of its ARM
// properties ("" for a default Event Grid schema topic).
func createTopic(t *testing.T, name, properties string) {
	t.Helper()
	props := `"key1":"` + topicKey + `"`
	if properties != "" {
		props += "," + properties
	}
	if status, body := admin(t, "PUT", "/admin/topics/"+name, `{"properties":{`+props+`}}`); status != 200 && status != 201 {
		t.Fatalf("creating topic %s: %d %s", name, status, body)
	}
}

// subscribe creates or updates a WebHook subscription; extra is more of its ARM properties.
func subscribe(t *testing.T, topic, name, url, extra string) (int, []byte) {
	t.Helper()
	props := `"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"` + url + `"}}`
	if extra != "" {
		props += "," + extra
	}
	return admin(t, "PUT", "/admin/topics/"+topic+"/eventSubscriptions/"+name, `{"properties":{`+props+`}}`)
}

// mustSubscribe is subscribe that fails the test unless the endpoint was validated.
func mustSubscribe(t *testing.T, topic, name, url, extra string) {
	t.Helper()
	if status, body := subscribe(t, topic, name, url, extra); status != 200 && status != 201 {
		t.Fatalf("subscribing %s to %s: %d %s", name, topic, status, body)
	}
}

// publish posts body to a topic's classic route with the topic key.
func publish(t *testing.T, topic, contentType, body string) (int, []byte) {
	t.Helper()
	h := map[string]string{"aeg-sas-key": topicKey}
	if contentType != "" {
		h["Content-Type"] = contentType
	}
	return call(t, "POST", "/topics/"+topic+"/api/events?api-version=2018-01-01", h, body)
}

// apiError is Event Grid's error body.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"details"`
	} `json:"error"`
}

func decodeError(t *testing.T, body []byte) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("body %s is not Event Grid's error shape", body)
	}
	return e
}
