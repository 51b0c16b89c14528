package grpcflight

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/flightcache/flightcache/key"
)

// The key of a call (package key): the namespace, the full method as the
// ID, then the extra dimensions req (the SHA-256 of the request's
// deterministic encoding) and, when KeyMetadata declares keys, md (the
// SHA-256 of the declared keys' values, an absent key apart from an empty
// one). Digests keep requests and credentials out of the keys a shared
// tier stores.

// key returns the key of a call of method with req and md, or false when
// the call must pass straight through: it carries an undeclared
// credential, or its request cannot be encoded or keyed.
func (l *Layer) key(method string, req proto.Message, md metadata.MD) (string, bool) {
	for _, c := range l.credentials {
		if len(md.Get(c)) > 0 {
			return "", false
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return "", false
	}
	sum := sha256.Sum256(b)
	kb := key.New(l.opts.Namespace).ID(method).Dim("req", hex.EncodeToString(sum[:]))
	if len(l.keyMetadata) > 0 {
		h := sha256.New()
		for _, name := range l.keyMetadata {
			h.Write([]byte(name))
			values := md.Get(name)
			if values == nil {
				h.Write([]byte("\x00absent\n"))
				continue
			}
			for _, v := range values {
				h.Write([]byte{':'})
				h.Write([]byte(v))
			}
			h.Write([]byte{'\n'})
		}
		kb = kb.Dim("md", hex.EncodeToString(h.Sum(nil)))
	}
	k, err := kb.Build()
	return k, err == nil
}

// splitMethod splits "/package.Service/Method" into its service and method
// names.
func splitMethod(full string) (service, method string, ok bool) {
	rest, ok := strings.CutPrefix(full, "/")
	if !ok {
		return "", "", false
	}
	service, method, ok = strings.Cut(rest, "/")
	return service, method, ok && service != "" && method != "" && !strings.Contains(method, "/")
}

// enabled reports whether calls of method are collapsed: Options.Methods
// names it, or NoSideEffects is on and its descriptor says
// idempotency_level = NO_SIDE_EFFECTS. The descriptor's answer is looked up
// once per method.
func (l *Layer) enabled(method string) bool {
	if l.methods[method] {
		return true
	}
	if !l.opts.NoSideEffects {
		return false
	}
	if v, ok := l.optIn.Load(method); ok {
		return v.(bool)
	}
	on := l.noSideEffects(method)
	l.optIn.Store(method, on)
	return on
}

// noSideEffects looks method up in Options.Files.
func (l *Layer) noSideEffects(method string) bool {
	service, name, ok := splitMethod(method)
	if !ok {
		return false
	}
	d, err := l.opts.Files.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return false
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return false
	}
	m := sd.Methods().ByName(protoreflect.Name(name))
	if m == nil {
		return false
	}
	opts, ok := m.Options().(*descriptorpb.MethodOptions)
	return ok && opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS
}
