// Package archtest holds tests of the project's architecture rules, such as
// "the core packages import only the standard library". It has no code.
package archtest
