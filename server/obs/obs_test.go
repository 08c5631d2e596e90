package obs

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// serve sends n requests to /ok and one to /boom through the middleware
// at the given --access-log setting and returns the log lines.
func serve(t *testing.T, setting string, n int) (ok, boom int) {
	t.Helper()
	rate, err := ParseAccessLog(setting)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(Middleware(log, NewMetrics(), rate))
	app.Get("/ok", func(c *fiber.Ctx) error { return c.SendString("ok") })
	app.Get("/boom", func(c *fiber.Ctx) error { return fiber.NewError(500, "boom") })
	for i := 0; i <= n; i++ {
		path := "/ok"
		if i == n {
			path = "/boom"
		}
		resp, err := app.Test(httptest.NewRequest("GET", path, nil), -1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		switch {
		case strings.Contains(line, "path=/ok status=200"):
			ok++
		case strings.Contains(line, "level=ERROR") && strings.Contains(line, "path=/boom status=500"):
			boom++
		}
	}
	return ok, boom
}

func TestAccessLogModes(t *testing.T) {
	const n = 2000
	for _, tc := range []struct {
		setting  string
		min, max int
	}{
		{"on", n, n},
		{"", n, n},
		{"off", 0, 0},
		{"0", 0, 0},
		// Binomial(2000, 0.1): mean 200, sd 13.4; ±75 is over 5 sd.
		{"0.1", 125, 275},
		{"1", n, n},
	} {
		t.Run("access-log="+tc.setting, func(t *testing.T) {
			ok, boom := serve(t, tc.setting, n)
			if ok < tc.min || ok > tc.max {
				t.Errorf("%d of %d successful requests logged, want %d to %d", ok, n, tc.min, tc.max)
			}
			if boom != 1 {
				t.Errorf("the server error was logged %d times, want once whatever the setting", boom)
			}
		})
	}
}

func TestParseAccessLogRefusesNonsense(t *testing.T) {
	for _, s := range []string{"yes", "1.5", "-0.1", "10%", "NaN"} {
		if _, err := ParseAccessLog(s); err == nil || !strings.Contains(err.Error(), "--access-log") {
			t.Errorf("ParseAccessLog(%q) = %v, want an error naming --access-log", s, err)
		}
	}
}
