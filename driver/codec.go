package driver

import "encoding/json"

// Codec turns values into bytes for the shared tier and back. Unmarshal must
// accept everything Marshal produced, including from other instances running
// the same version of the type.
type Codec[V any] interface {
	Marshal(v V) ([]byte, error)
	Unmarshal(data []byte) (V, error)
}

// JSONCodec is the default Codec, on encoding/json.
type JSONCodec[V any] struct{}

// Marshal encodes v as JSON.
func (JSONCodec[V]) Marshal(v V) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes JSON into a new V.
func (JSONCodec[V]) Unmarshal(data []byte) (V, error) {
	var v V
	err := json.Unmarshal(data, &v)
	return v, err
}
