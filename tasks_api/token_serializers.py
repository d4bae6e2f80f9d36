"""What `/api/v1/tokens/` reads and answers, apart from its views: the console's token form checks
a new token with the same serializer, and the console must not import the API's views."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.utils import timezone
from rest_framework import serializers

from tasks_api.models import ApiToken, Scope
from tasks_api.serializers import StrictSerializer, TimeField
from tasks_core.limits import bad_text
from tasks_core.models import Team

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class TokenSerializer(serializers.ModelSerializer):
    """A token as lists show it: its prefix, never the token itself."""

    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="name", read_only=True)
    user: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True)
    active = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = ["id", "name", "team", "user", "scope", "prefix", "created_at", "expires_at",
                  "revoked_at", "last_used_at", "active"]
        read_only_fields = fields

    def get_active(self, row: ApiToken) -> bool:
        return row.is_active(timezone.now())


class NewTokenSerializer(TokenSerializer):
    """A token just created: the only answer that carries the token."""

    token = serializers.CharField(read_only=True, help_text="Shown once; only a hash is kept.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class CreateTokenSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    team = serializers.CharField(max_length=100, required=False,
                                 help_text="One of the caller's teams; needed when it has several.")
    scope = serializers.ChoiceField(choices=Scope.choices, default=Scope.FULL)
    expires_at = TimeField(required=False, allow_null=True)

    def validate_name(self, value: str) -> str:
        if bad_text(value) or not value.isprintable():
            raise serializers.ValidationError("Use printable characters only.")
        return value

    def validate_expires_at(self, value: Any) -> Any:
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("Must be in the future.")
        return value
