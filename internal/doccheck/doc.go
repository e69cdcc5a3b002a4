// Package doccheck holds no code: its tests check lines of the repository's
// prose against the repository (the files the README's Layout names, the
// measured figures the documents quote, the Kubernetes manifests and the
// readiness advice), so that the documents cannot drift from it unseen.
// They read files only, and take milliseconds.
package doccheck
