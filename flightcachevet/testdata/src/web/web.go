// Package web is the little of net/http that the test cases need, so that
// the analyzer tests do not type-check net/http from source.
package web

import "context"

type Request struct {
	ctx    context.Context
	Header map[string]string
}

func (r *Request) Context() context.Context { return r.ctx }

func (r *Request) PathValue(name string) string { return name }

type ResponseWriter interface {
	Write(p []byte) (int, error)
}

type ServeMux struct{}

func (m *ServeMux) HandleFunc(pattern string, h func(ResponseWriter, *Request)) {}

func HandleFunc(pattern string, h func(ResponseWriter, *Request)) {}

func Error(w ResponseWriter, msg string, code int) {}
