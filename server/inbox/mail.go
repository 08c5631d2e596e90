package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/notice"
	"github.com/anvilproject/anvil/server/store"
)

// A notice's mail states; a failure is MailFailed followed by why.
const (
	MailPending = "pending"
	MailSending = "sending"
	MailSent    = "sent"
	MailFailed  = "failed: "
)

// MailConfig is the operator's SMTP relay; a zero Addr sends no mail.
type MailConfig struct {
	// Addr is the relay's host:port. Go's net/smtp speaks to it and
	// upgrades with STARTTLS whenever the relay offers it.
	Addr string
	// From is the sender address.
	From string
	// User and Password authenticate with PLAIN, which net/smtp sends
	// only over TLS or to a relay on this host.
	User, Password string
	// PortalURL is the portal's address, for links in the mail; set by
	// serve from the listener when empty.
	PortalURL string
	// Poll is how often pending mail is looked for (default 2 s).
	Poll time.Duration
}

// Validate refuses a relay that could not be sent through.
func (c MailConfig) Validate() error {
	if c.Addr == "" {
		if c.From != "" || c.User != "" {
			return errors.New("--smtp-from and --smtp-user need --smtp-addr")
		}
		return nil
	}
	if _, port, err := net.SplitHostPort(c.Addr); err != nil || port == "" {
		return errors.New("--smtp-addr: give the relay as host:port, such as mail.example.com:587")
	}
	if a, err := mail.ParseAddress(c.From); err != nil || a.Name != "" {
		return errors.New("--smtp-from: give the sender as an address such as anvil@example.com")
	}
	if (c.User == "") != (c.Password == "") {
		return errors.New("--smtp-user and --smtp-password go together")
	}
	if c.PortalURL != "" {
		if u, err := url.Parse(c.PortalURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("--smtp-portal-url: give the portal's address, such as https://anvil.example.com")
		}
	}
	return nil
}

// Mailer sends pending notices through the relay. Replicas share the
// work: one claims a notice by moving it from pending to sending with a
// conditional update before it sends, so each is sent at most once; a
// replica that dies between the claim and the send loses that mail (the
// notice stays in the inbox) rather than sending it twice.
type Mailer struct {
	db  *store.DB
	cfg MailConfig
	log *slog.Logger
}

// NewMailer validates cfg and returns its mailer, or nil when no relay
// is configured.
func NewMailer(db *store.DB, cfg MailConfig, log *slog.Logger) (*Mailer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Addr == "" {
		return nil, nil
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	return &Mailer{db: db, cfg: cfg, log: log}, nil
}

// SetPortalURL sets the links' address when the operator gave none.
func (m *Mailer) SetPortalURL(u string) {
	if m.cfg.PortalURL == "" {
		m.cfg.PortalURL = u
	}
}

// Run sends mail until ctx ends.
func (m *Mailer) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Poll)
	defer t.Stop()
	for {
		for m.step(ctx) {
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// step sends one pending notice; false when there was none (or the
// database did not answer).
func (m *Mailer) step(ctx context.Context) bool {
	n, err := m.db.Notice.Query().Where(notice.Mail(MailPending)).Order(ent.Asc(notice.FieldID)).First(ctx)
	if err != nil {
		if !ent.IsNotFound(err) && ctx.Err() == nil {
			m.log.Error("mail: reading pending notices", "err", err)
		}
		return false
	}
	won, err := m.db.Notice.Update().Where(notice.ID(n.ID), notice.Mail(MailPending)).SetMail(MailSending).Save(ctx)
	if err != nil || won == 0 {
		return err == nil // another replica took it: look again
	}
	state := MailSent
	if err := m.send(n); err != nil {
		state = MailFailed + err.Error()
		m.log.Warn("mail: notice not sent", "notice", n.UUID, "relay", m.cfg.Addr, "err", err)
	}
	if err := m.db.Notice.UpdateOneID(n.ID).SetMail(state).Exec(context.WithoutCancel(ctx)); err != nil {
		m.log.Error("mail: recording the send", "notice", n.UUID, "err", err)
	}
	return true
}

// send mails n to its addresses, one message to all of them.
func (m *Mailer) send(n *ent.Notice) error {
	msg := m.message(n)
	var auth smtp.Auth
	if m.cfg.User != "" {
		host, _, _ := net.SplitHostPort(m.cfg.Addr)
		auth = smtp.PlainAuth("", m.cfg.User, m.cfg.Password, host)
	}
	return smtp.SendMail(m.cfg.Addr, auth, m.cfg.From, n.MailTo, msg)
}

// message is n as an RFC 5322 message: UTF-8 text, quoted-printable,
// with a link to the inbox.
func (m *Mailer) message(n *ent.Notice) []byte {
	var b bytes.Buffer
	h := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	h("From", m.cfg.From)
	h("To", strings.Join(n.MailTo, ", "))
	h("Subject", mime.QEncoding.Encode("utf-8", n.Subject))
	h("Date", n.CreatedAt.UTC().Format(time.RFC1123Z))
	_, domain, _ := strings.Cut(m.cfg.From, "@")
	h("Message-ID", "<"+uuid.NewString()+"@"+domain+">")
	h("X-Anvil-Notice", n.UUID)
	h("X-Anvil-Event", EventPrefix+n.Kind)
	h("MIME-Version", "1.0")
	h("Content-Type", "text/plain; charset=utf-8")
	h("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	text := n.Subject + "\n"
	if n.Body != "" {
		text += "\n" + n.Body + "\n"
	}
	if m.cfg.PortalURL != "" {
		link := strings.TrimSuffix(m.cfg.PortalURL, "/") + "/inbox"
		if n.ThreadUUID != "" {
			link += "/threads/" + n.ThreadUUID
		}
		text += "\n" + link + "\n"
	}
	w := quotedprintable.NewWriter(&b)
	w.Write([]byte(strings.ReplaceAll(text, "\n", "\r\n")))
	w.Close()
	return b.Bytes()
}
