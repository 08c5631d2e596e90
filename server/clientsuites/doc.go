// Package clientsuites runs real clients' own test suites, unmodified,
// against a live Anvil: gophercloud's baremetal acceptance tests,
// openstacksdk's functional baremetal tests, ironic-tempest-plugin's API
// tests, and CCI-MOC's ESI-Leap clients (esisdk's functional tests and
// python-esileapclient's openstack esi commands) against the leasing API.
// It holds only tests; the failures Anvil accepts are listed, each with
// its reason, in sdk-allowed-failures.txt and tempest-allowed-failures.txt.
package clientsuites
