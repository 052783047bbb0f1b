package seal

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
)

// marshalSigningKey encodes k as PEM PKCS #8, the form LoadSigningKey
// reads.
func marshalSigningKey(k ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// marshalPublicKey encodes pub as PEM "PUBLIC KEY", for a trust policy.
func marshalPublicKey(pub ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
