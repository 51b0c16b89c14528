// Package archtest holds tests of the project's architecture rules, such as
// "the core packages import only the standard library" and "package
// singleflight exports exactly its fixed API". It has no code.
package archtest
