package p2p

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
)

// ErrKey is wrapped by errors about identity and pre-shared key files.
var ErrKey = errors.New("p2p: bad key file")

const keyHeader = "# gridmgr identity key (Ed25519, libp2p protobuf, base64). Keep it secret.\n"

// GenerateIdentity returns a new Ed25519 key.
func GenerateIdentity() (crypto.PrivKey, error) {
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	return sk, err
}

// PeerIDOf returns the peer id of a key in its text form.
func PeerIDOf(sk crypto.PrivKey) string {
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		return ""
	}
	return id.String()
}

// WriteIdentity writes sk to path with mode 0600, creating the directory
// (0700) if needed. It refuses to overwrite an existing file.
func WriteIdentity(path string, sk crypto.PrivKey) error {
	raw, err := crypto.MarshalPrivateKey(sk)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.WriteString(keyHeader)
	fmt.Fprintf(&b, "# peer id: %s\n", PeerIDOf(sk))
	b.WriteString(base64.StdEncoding.EncodeToString(raw))
	b.WriteString("\n")
	return writeSecret(path, b.Bytes())
}

// ReadIdentity reads a key written by WriteIdentity. Only Ed25519 keys are
// accepted.
func ReadIdentity(path string) (crypto.PrivKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var body strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		body.WriteString(line)
	}
	raw, err := base64.StdEncoding.DecodeString(body.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: not base64: %v", ErrKey, path, err)
	}
	sk, err := crypto.UnmarshalPrivateKey(raw)
	if err != nil {
		// The decoder's own words ("proto: cannot parse invalid
		// wire-format data") mean nothing to the file's owner.
		return nil, fmt.Errorf("%w: %s: not a libp2p identity key (gridmgr keygen writes one)", ErrKey, path)
	}
	if sk.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("%w: %s: key type %v, want Ed25519", ErrKey, path, sk.Type())
	}
	return sk, nil
}

// LoadOrCreateIdentity reads the key at path, or creates one there if the
// file does not exist; created says which.
func LoadOrCreateIdentity(path string) (sk crypto.PrivKey, created bool, err error) {
	sk, err = ReadIdentity(path)
	if err == nil {
		return sk, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	if sk, err = GenerateIdentity(); err != nil {
		return nil, false, err
	}
	if err = WriteIdentity(path, sk); err != nil {
		return nil, false, err
	}
	return sk, true, nil
}

// GeneratePSK returns a new libp2p pre-shared key in the swarm.key format.
func GeneratePSK() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	return []byte("/key/swarm/psk/1.0.0/\n/base16/\n" + hex.EncodeToString(k) + "\n"), nil
}

// WritePSK writes a new pre-shared key to path with mode 0600.
func WritePSK(path string) error {
	k, err := GeneratePSK()
	if err != nil {
		return err
	}
	return writeSecret(path, k)
}

// ReadPSK reads a pre-shared key file in the swarm.key format.
func ReadPSK(path string) (pnet.PSK, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	psk, err := pnet.DecodeV1PSK(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: not a libp2p pre-shared key (swarm.key format): %v", ErrKey, path, err)
	}
	return psk, nil
}

func writeSecret(path string, data []byte) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
