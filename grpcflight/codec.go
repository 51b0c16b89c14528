package grpcflight

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// ErrCorrupt is matched (errors.Is) by the error of Codec.Unmarshal on
// bytes that are not a stored response of a known message type.
var ErrCorrupt = errors.New("grpcflight: corrupt stored response")

// Codec stores responses in a Cache's shared tier (Options.Codec of
// flightcache.New[proto.Message]): each as a google.protobuf.Any, its
// message type's full name and its encoding. Unmarshal finds the type in
// protoregistry.GlobalTypes, where generated code registers its messages.
type Codec struct{}

// Marshal encodes v with its type's name.
func (Codec) Marshal(v proto.Message) ([]byte, error) {
	a, err := anypb.New(v)
	if err != nil {
		return nil, err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(a)
}

// Unmarshal decodes a response Marshal encoded, or returns an error
// matching ErrCorrupt.
func (Codec) Unmarshal(data []byte) (proto.Message, error) {
	var a anypb.Any
	if err := proto.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return m, nil
}
