package main

import (
	"crypto"
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

// pki holds the paths of the cluster's certificates and keys.
type pki struct {
	caCert, caKey           string
	servingCert, servingKey string
	adminCert, adminKey     string
	cmCert, cmKey           string
	saKey, saPub            string
}

// makePKI writes a CA, the API server's serving certificate (127.0.0.1,
// localhost and the kubernetes Service's names), client certificates for
// an admin (group system:masters) and for the controller manager, and the
// service-account signing key pair. ECDSA P-256 throughout: fast to make.
func makePKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "leash-testenv-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	if p.caCert, p.caKey, err = writePair(dir, "ca", caDER, caKey); err != nil {
		return nil, err
	}

	serial := int64(2)
	issue := func(name string, tmpl *x509.Certificate) (string, string, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		serial++
		tmpl.NotBefore = now.Add(-time.Hour)
		tmpl.NotAfter = now.Add(365 * 24 * time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			return "", "", err
		}
		return writePair(dir, name, der, key)
	}
	if p.servingCert, p.servingKey, err = issue("apiserver", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
	}); err != nil {
		return nil, err
	}
	if p.adminCert, p.adminKey, err = issue("admin", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "leash-testenv-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	if p.cmCert, p.cmKey, err = issue("controller-manager", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:kube-controller-manager"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	p.saKey = filepath.Join(dir, "sa.key")
	if err := writeKey(p.saKey, saKey); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	p.saPub = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

func writePair(dir, name string, der []byte, key crypto.Signer) (string, string, error) {
	cert := filepath.Join(dir, name+".crt")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	keyPath := filepath.Join(dir, name+".key")
	return cert, keyPath, writeKey(keyPath, key)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}
