package io.lakesink.serve;

import java.util.Hashtable;
import javax.naming.Context;
import javax.naming.NamingException;
import javax.naming.directory.InitialDirContext;
import javax.naming.ldap.Rdn;
import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The Thrift server's CUSTOM login check for {@code lakesink serve --ldap-url}: a login is a
 * simple bind to the directory as the user's DN with their password.
 *
 * <p>In place of the server's own LDAP check, which passes on the password as the server
 * decoded it (so a non-ASCII password never binds; see {@link SaslPlain}), puts the user name
 * into the DN unescaped, and waits for a directory that does not answer for ever. The
 * directory's URL and the DN patterns ({@code %s} for the user name, several separated by
 * {@code :}, tried in turn) are the system properties {@value #URL_PROPERTY} and
 * {@value #USER_DN_PROPERTY}, set by {@code lakesink serve}.
 */
public final class LdapAuthenticator implements PasswdAuthenticationProvider {

  public static final String URL_PROPERTY = "lakesink.serve.ldap.url";
  public static final String USER_DN_PROPERTY = "lakesink.serve.ldap.user-dn";
  private static final String TIMEOUT_MS = "10000";

  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    String url = System.getProperty(URL_PROPERTY);
    String patterns = System.getProperty(USER_DN_PROPERTY);
    if (url == null || patterns == null) {
      throw new AuthenticationException(
          "lakesink serve set no LDAP directory (" + URL_PROPERTY + "): every login is refused");
    }
    String name = SaslPlain.text(user);
    byte[] secret = SaslPlain.bytes(password);
    // An empty password makes an LDAP bind anonymous, which succeeds for any name where the
    // directory allows it. Spark's SASL PLAIN server refuses an empty password before any
    // check (PlainSaslServer); this keeps it refused whatever reaches this check.
    if (name.isEmpty() || secret.length == 0) {
      throw new AuthenticationException("wrong user name or password");
    }
    NamingException unreachable = null;
    for (String pattern : patterns.split(":")) {
      Hashtable<String, Object> env = new Hashtable<>();
      env.put(Context.INITIAL_CONTEXT_FACTORY, "com.sun.jndi.ldap.LdapCtxFactory");
      env.put(Context.PROVIDER_URL, url);
      env.put(Context.SECURITY_AUTHENTICATION, "simple");
      env.put(Context.SECURITY_PRINCIPAL, pattern.replace("%s", Rdn.escapeValue(name)));
      env.put(Context.SECURITY_CREDENTIALS, secret);  // bytes: sent as they came
      env.put("com.sun.jndi.ldap.connect.timeout", TIMEOUT_MS);
      env.put("com.sun.jndi.ldap.read.timeout", TIMEOUT_MS);
      try {
        new InitialDirContext(env).close();
        return;
      } catch (javax.naming.AuthenticationException wrong) {
        // not this DN: try the next pattern
      } catch (NamingException e) {
        unreachable = e;
      }
    }
    if (unreachable != null) {
      throw new AuthenticationException(
          "the LDAP directory " + url + " did not answer the login ("
              + unreachable.getClass().getSimpleName() + ")");
    }
    throw new AuthenticationException("wrong user name or password");
  }
}
