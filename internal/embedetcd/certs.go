package embedetcd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs names the PEM files WriteCerts made: a CA, and a server and a
// client certificate it signed.
type Certs struct {
	// Server is what Options.TLS takes: the server's certificate and key
	// (for 127.0.0.1, ::1 and localhost), and the CA its clients'
	// certificates must be signed by.
	Server TLSFiles
	// Client is a client certificate (for client authentication, with
	// common name ClientCN) and its key, and the CA that signed the
	// server's.
	Client TLSFiles
}

// ClientCN is the common name of the client certificate WriteCerts makes.
// With etcd's auth enabled, a client that presents it and no user name is
// taken for the user of that name.
const ClientCN = "rink-test-client"

// WriteCerts makes a fresh CA (ECDSA P-256, valid for a day) and a server
// and a client certificate it signs, and writes them as PEM files into dir.
// Nothing is checked in: tests make their certificates at run time.
func WriteCerts(dir string) (Certs, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certs{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rink test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Certs{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Certs{}, err
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := writePEM(caFile, "CERTIFICATE", caDER); err != nil {
		return Certs{}, err
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, name string) (TLSFiles, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return TLSFiles{}, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return TLSFiles{}, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return TLSFiles{}, err
		}
		f := TLSFiles{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: caFile}
		if err := writePEM(f.Cert, "CERTIFICATE", der); err != nil {
			return TLSFiles{}, err
		}
		return f, writePEM(f.Key, "EC PRIVATE KEY", keyDER)
	}
	var c Certs
	if c.Server, err = leaf(2, "localhost", x509.ExtKeyUsageServerAuth, "server"); err != nil {
		return Certs{}, err
	}
	if c.Client, err = leaf(3, ClientCN, x509.ExtKeyUsageClientAuth, "client"); err != nil {
		return Certs{}, err
	}
	return c, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
