package cli

// SetDefaultConfig points the default config file elsewhere for the
// test's life, since tests may not write /etc/anvil.
func SetDefaultConfig(path string) (restore func()) {
	old := defaultConfig
	defaultConfig = path
	return func() { defaultConfig = old }
}
