package io.lakesink.serve;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;
import org.springframework.security.crypto.bcrypt.BCrypt;

/**
 * The Thrift server's CUSTOM login check for {@code lakesink serve}: a user name and password
 * are checked against the bcrypt hashes of lakesink's users file ({@code NAME:HASH} lines,
 * written by {@code lakesink serve-users}).
 *
 * <p>The server builds a new check for every login (through a fresh HiveConf, which sees the
 * JVM's system properties but no Spark setting), so the file is read at every login: a user
 * added or removed counts from the next one, without a restart. Its path is the system
 * property {@value #USERS_PROPERTY}, set by {@code lakesink serve}.
 */
public final class UsersFileAuthenticator implements PasswdAuthenticationProvider {

  public static final String USERS_PROPERTY = "lakesink.serve.users";

  // bcrypt reads 72 bytes of a password and ignores the rest; lakesink serve-users refuses
  // longer ones, so a longer one sent at login is wrong, not silently cut to a right one.
  private static final int MAX_PASSWORD_BYTES = 72;

  // Checked for an unknown user too, so that a login takes as long whether or not the name
  // exists: a bcrypt hash, of the cost lakesink uses, of a random password nobody knows.
  private static final String NO_USER_HASH =
      "$2b$12$Arxk/34W9rDFWhwqKNLUb.nAADSAAg8wOdek6.P93DV6V/vHwpcJe";

  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    String file = System.getProperty(USERS_PROPERTY);
    if (file == null || file.isEmpty()) {
      throw new AuthenticationException(
          "lakesink serve set no users file (" + USERS_PROPERTY + "): every login is refused");
    }
    String hash = findHash(Path.of(file), SaslPlain.text(user));
    byte[] secret = SaslPlain.bytes(password);
    boolean matches;
    try {
      matches = BCrypt.checkpw(secret, hash == null ? NO_USER_HASH : hash);
    } catch (IllegalArgumentException malformed) {
      throw new AuthenticationException(
          "the users file " + file + " holds a malformed hash; set that user's password "
              + "again with lakesink serve-users add");
    }
    if (hash == null || !matches || secret.length == 0 || secret.length > MAX_PASSWORD_BYTES) {
      throw new AuthenticationException("wrong user name or password");
    }
  }

  private static String findHash(Path file, String user) throws AuthenticationException {
    List<String> lines;
    try {
      lines = Files.readAllLines(file, StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new AuthenticationException(
          "cannot read the users file " + file + " (" + e.getClass().getSimpleName()
              + "): every login is refused until it is readable");
    }
    for (String line : lines) {
      int colon = line.indexOf(':');
      if (colon > 0 && line.substring(0, colon).equals(user)) {
        return line.substring(colon + 1).strip();
      }
    }
    return null;
  }
}
