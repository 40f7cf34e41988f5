// Command nullwebhook is the limit of an admission webhook, for the
// benchmarks (bench/real_admission.sh): an HTTPS server on 127.0.0.1 that
// allows every AdmissionReview it is sent, reading only the request's uid.
// What kube-apiserver spends calling it is the least any webhook costs.
//
// It serves a self-signed ECDSA P-256 certificate for 127.0.0.1, prints one
// JSON line when it listens ({"url": ..., "caBundle": base64 PEM}) and
// stops when its standard input closes or on SIGTERM.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type review struct {
	Request *struct {
		UID string `json:"uid"`
	} `json:"request"`
}

type response struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Response   struct {
		UID     string `json:"uid"`
		Allowed bool   `json:"allowed"`
	} `json:"response"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	flag.Parse()

	cert, certPEM, err := selfSigned()
	if err != nil {
		log.Fatalf("nullwebhook: certificate: %v", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("nullwebhook: listen %s: %v", *listen, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", allow)
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && err != http.ErrServerClosed {
			log.Fatalf("nullwebhook: serve: %v", err)
		}
	}()
	ready, _ := json.Marshal(map[string]string{
		"url":      "https://" + ln.Addr().String() + "/validate",
		"caBundle": base64.StdEncoding.EncodeToString(certPEM),
	})
	fmt.Println(string(ready))

	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-done:
	case <-sig:
	}
	_ = srv.Close()
}

// allow answers an AdmissionReview with allowed: true and its uid.
func allow(w http.ResponseWriter, r *http.Request) {
	var in review
	if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&in); err != nil || in.Request == nil {
		http.Error(w, "an AdmissionReview with a request is expected", http.StatusBadRequest)
		return
	}
	var out response
	out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
	out.Response.UID, out.Response.Allowed = in.Request.UID, true
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&out)
}

// selfSigned makes a certificate for 127.0.0.1 that is its own CA.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nullwebhook"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, certPEM, nil
}
