// Package clientsuites runs real Ironic clients' own test suites, unmodified,
// against a live Anvil: gophercloud's baremetal acceptance tests and
// openstacksdk's functional baremetal tests. It holds only tests; the
// openstacksdk failures Anvil accepts are listed, each with its reason, in
// sdk-allowed-failures.txt.
package clientsuites
