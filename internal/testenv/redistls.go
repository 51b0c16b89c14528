package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLSRedis is a private redis-server that speaks TLS only, with a
// certificate authority made for the test.
type TLSRedis struct {
	*RedisServer // Addr is the TLS port's address; the plain port is off
	// CAFile is the PEM certificate of the CA that signed the server's
	// certificate (for 127.0.0.1 and localhost) and the client one.
	CAFile string
	// ClientCertFile and ClientKeyFile are a client certificate the CA
	// signed, and its key, in PEM.
	ClientCertFile, ClientKeyFile string
	// OtherCAFile is the PEM certificate of a CA that signed nothing here:
	// a client trusting only it must refuse the server.
	OtherCAFile string
}

// StartRedisTLS starts a private redis-server listening with TLS only
// (--port 0 --tls-port P) on a free loopback port, its certificates
// generated for the test. With clientAuth the server asks for a client
// certificate signed by the CA (--tls-auth-clients yes). It is stopped
// when the test ends. redis-server must be built with TLS (BUILD_TLS=yes,
// as Debian's and Ubuntu's packages are).
func StartRedisTLS(t testing.TB, clientAuth bool, extra ...string) *TLSRedis {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCA(t, "flightcache test CA")
	other, _ := newCA(t, "flightcache other CA")
	r := &TLSRedis{
		CAFile:         writePEM(t, dir, "ca.crt", "CERTIFICATE", ca.Raw),
		OtherCAFile:    writePEM(t, dir, "other-ca.crt", "CERTIFICATE", other.Raw),
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
	}
	serverCert, serverKey := newLeaf(t, ca, caKey, "redis-server", x509.ExtKeyUsageServerAuth)
	certFile := writePEM(t, dir, "server.crt", "CERTIFICATE", serverCert)
	keyFile := writePEM(t, dir, "server.key", "PRIVATE KEY", serverKey)
	clientCert, clientKey := newLeaf(t, ca, caKey, "productd", x509.ExtKeyUsageClientAuth)
	writePEM(t, dir, "client.crt", "CERTIFICATE", clientCert)
	writePEM(t, dir, "client.key", "PRIVATE KEY", clientKey)

	auth := "no"
	if clientAuth {
		auth = "yes"
	}
	port := FreePort(t)
	args := append([]string{"--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", r.CAFile,
		"--tls-auth-clients", auth, "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", dir}, extra...)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	pair, err := tls.X509KeyPair(pemBytes("CERTIFICATE", clientCert), pemBytes("PRIVATE KEY", clientKey))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	r.RedisServer = startServer(t, port, args, func() error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		return authPing(c, "", "")
	})
	return r
}

// newCA makes a self-signed CA certificate and its key.
func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// newLeaf makes a certificate for 127.0.0.1 and localhost signed by ca,
// and returns it and its PKCS#8 key, both DER.
func newLeaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, usage x509.ExtKeyUsage) (cert, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	cert, err = x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err = x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pemBytes(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func writePEM(t testing.TB, dir, name, kind string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pemBytes(kind, der), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
